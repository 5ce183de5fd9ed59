/*
 * tmpdir.h - where tests write their temporary files and sockets.
 */
#ifndef CP_TEST_TMPDIR_H
#define CP_TEST_TMPDIR_H

/*
 * $TMPDIR when it is set and not empty, else the build's tmp directory
 * (created when missing): never a place outside those two.
 */
const char *tmp_dir(void);

#endif
