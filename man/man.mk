# man/: mdoc pages, installed under $(MANDIR)/manN.
MANPAGES := $(wildcard man/*.[1-8])
