# man/: mdoc pages, installed under $(MANDIR)/manN.
MANPAGES := $(wildcard man/*.[1-8])

# Pages that describe several functions are also installed under the other
# names, as "page:name" pairs (section 3 only).
MANLINKS3 := cp_connect.3:cp_connect_opts_init.3 cp_connect.3:cp_close.3 \
	cp_connect.3:cp_socket_path.3 \
	cp_submit.3:cp_params_init.3 cp_submit.3:cp_submit_tokens.3 \
	cp_submit.3:cp_cancel.3 cp_next_event.3:cp_event_fd.3 \
	cp_model_info.3:cp_stats.3 cp_model_info.3:cp_tokenize.3 \
	cp_model_info.3:cp_detokenize.3 \
	cp_connect.3:cp_connect_opts_init_v1.3 cp_connect.3:cp_connect_v1.3 \
	cp_submit.3:cp_params_init_v1.3 cp_submit.3:cp_submit_v1.3 \
	cp_submit.3:cp_submit_tokens_v1.3 cp_next_event.3:cp_next_event_v1.3 \
	cp_model_info.3:cp_model_info_v1.3 cp_submit.3:cp_submit_chat.3 \
	cp_submit.3:cp_submit_chat_v1.3
INSTALL_EXTRA += for l in $(MANLINKS3); do \
	ln -sf "$${l%%:*}" "$(DESTDIR)$(MANDIR)/man3/$${l\#*:}"; done;
UNINSTALL_EXTRA += for l in $(MANLINKS3); do \
	rm -f "$(DESTDIR)$(MANDIR)/man3/$${l\#*:}"; done;
