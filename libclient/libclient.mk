# libclient/: libcpclient (shared and static) and cpq.
LIBCLIENT_ALL :=
