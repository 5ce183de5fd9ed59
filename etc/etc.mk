# etc/: sample configuration and service units.  The units name the
# installed paths, filled in at install time.
SYSTEMD_UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSTEMD_USERUNITDIR ?= $(PREFIX)/lib/systemd/user
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d

$(BUILD)/etc/%: etc/%
	@mkdir -p $(@D)
	$(Q)sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' $< > $@

# The per-user unit is installed under the name cpd.service.
$(BUILD)/etc/user/cpd.service: etc/cpd.user.service
	@mkdir -p $(@D)
	$(Q)sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' $< > $@

# Socket units (socket activation): the per-user one installed as cpd.socket.
$(BUILD)/etc/user/cpd.socket: etc/cpd.user.socket
	@mkdir -p $(@D)
	$(Q)cp $< $@
all: $(BUILD)/etc/user/cpd.socket
INSTALL_FILES += 644:etc/cpd.socket:$(SYSTEMD_UNITDIR)
INSTALL_FILES += 644:$(BUILD)/etc/user/cpd.socket:$(SYSTEMD_USERUNITDIR)

ETC_BUILT := $(BUILD)/etc/cpd.service $(BUILD)/etc/user/cpd.service
all: $(ETC_BUILT)
INSTALL_FILES += 644:etc/cpd.yaml:$(SYSCONFDIR)/cpd
INSTALL_FILES += 644:$(BUILD)/etc/cpd.service:$(SYSTEMD_UNITDIR)
INSTALL_FILES += 644:$(BUILD)/etc/user/cpd.service:$(SYSTEMD_USERUNITDIR)
# sysusers.d(5) files are named after the package.
$(BUILD)/etc/sysusers/cpd.conf: etc/cpd.sysusers.conf
	@mkdir -p $(@D)
	$(Q)cp $< $@
all: $(BUILD)/etc/sysusers/cpd.conf
INSTALL_FILES += 644:$(BUILD)/etc/sysusers/cpd.conf:$(SYSUSERSDIR)
# cpd-http's unit, ordered after cpd.service, when cpd-http is built.
ifneq ($(HTTP_SRCS),)
all: $(BUILD)/etc/cpd-http.service
INSTALL_FILES += 644:$(BUILD)/etc/cpd-http.service:$(SYSTEMD_UNITDIR)
ETC_BUILT += $(BUILD)/etc/cpd-http.service
endif
