"""cpclient - Python bindings of libcpclient, the client library of cpd.

A thin ctypes layer over libcpclient.so.0 (no compiled extension):

    import cpclient

    with cpclient.Client() as c:              # $CPD_SOCKET, else the default
        for ev in c.complete("Once upon a time", max_tokens=32, temperature=0):
            print(ev.text, end="")
        for ev in c.chat([("user", "Hello")], max_tokens=32):
            print(ev.text, end="")
        print(c.tokenize("Hello"), c.stats()["requests_total"])

complete() and chat() return a Request: an iterator of Event objects (the
request's TOKEN events, then its DONE), which cancels the request in the
daemon when it is closed or dropped before its end.  Errors of the library
and the daemon's ERROR events raise CpError, whose .code is the negative
errno or CP_E* value of cpclient.h.

Both take one output constraint (cpclient.h, GRAMMARS): grammar= GBNF
text (root the start rule), json_schema= a JSON schema (a dict, or its
JSON text), or json_output=True (any JSON value).  The request then ends
("stop") as soon as its text is complete; a grammar the daemon cannot
compile raises CpError (-EINVAL, or -E2BIG past a limit) naming the rule
or the schema path:

    text, _ = c.complete("Name: ", json_schema={"type": "object"}).text()
    obj = json.loads(text)

The library is found at $CPCLIENT_LIBRARY when set, else at the path that
`make install` wrote below, else by the dynamic linker (libcpclient.so.0).
One Client serves one thread at a time.
"""

import ctypes
import json
import os

__all__ = ["Client", "Request", "Event", "CpError", "EDEAD", "EPROTO"]

_LIBRARY = "@LIBCPCLIENT@"

EDEAD = -10001
EPROTO = -10002

EVENT_TOKEN, EVENT_DONE, EVENT_ERROR, EVENT_PROGRESS = 1, 2, 3, 4
GRAMMAR_GBNF, GRAMMAR_JSON_SCHEMA, GRAMMAR_JSON = 1, 2, 3
_FINISH = {1: "stop", 2: "length", 3: "cancelled", 4: "context", 5: "stalled"}
_ROLES = {"system": 0, "developer": 0, "user": 1, "assistant": 2, "tool": 3}

_c_char_pp = ctypes.POINTER(ctypes.c_char_p)


class _ConnectOpts(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("socket_path", ctypes.c_char_p),
                ("sq_entries", ctypes.c_uint32),
                ("cq_entries", ctypes.c_uint32),
                ("arena_bytes", ctypes.c_uint32), ("timeout_ms", ctypes.c_int)]


class _Params(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("max_tokens", ctypes.c_uint32),
                ("temperature", ctypes.c_float), ("top_p", ctypes.c_float),
                ("min_p", ctypes.c_float),
                ("repeat_penalty", ctypes.c_float),
                ("top_k", ctypes.c_int32), ("repeat_last_n", ctypes.c_uint32),
                ("use_seed", ctypes.c_int), ("seed", ctypes.c_uint64),
                ("logprobs", ctypes.c_int), ("stop", _c_char_pp),
                ("n_stop", ctypes.c_size_t), ("progress", ctypes.c_int),
                ("strict", ctypes.c_int),
                ("no_generation_prompt", ctypes.c_int),
                ("grammar_kind", ctypes.c_int),
                ("grammar", ctypes.c_char_p),
                ("grammar_len", ctypes.c_size_t)]


class _Message(ctypes.Structure):
    _fields_ = [("role", ctypes.c_int), ("content", ctypes.c_char_p),
                ("len", ctypes.c_size_t)]


class _Event(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("type", ctypes.c_int),
                ("req_id", ctypes.c_int), ("token", ctypes.c_int32),
                ("logprob", ctypes.c_float),
                ("text", ctypes.POINTER(ctypes.c_char)),
                ("text_len", ctypes.c_size_t), ("finish", ctypes.c_int),
                ("error", ctypes.c_int), ("n_prompt", ctypes.c_uint32),
                ("n_gen", ctypes.c_uint32), ("step", ctypes.c_uint32),
                ("n_cached", ctypes.c_uint32)]


class _ModelInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("name", ctypes.c_char * 64),
                ("arch", ctypes.c_char * 32), ("backend", ctypes.c_char * 16),
                ("n_ctx", ctypes.c_uint32), ("n_vocab", ctypes.c_uint32),
                ("n_embd", ctypes.c_uint32), ("n_layer", ctypes.c_uint32),
                ("n_head", ctypes.c_uint32), ("n_head_kv", ctypes.c_uint32),
                ("bos", ctypes.c_int32), ("eos", ctypes.c_int32),
                ("n_params", ctypes.c_uint64),
                ("chat_template", ctypes.c_char * 32),
                ("max_prompt_bytes", ctypes.c_uint32),
                ("max_requests", ctypes.c_uint32)]


class _Histogram(ctypes.Structure):
    _fields_ = [("count", ctypes.c_uint64), ("sum", ctypes.c_uint64),
                ("max", ctypes.c_uint64), ("le", ctypes.c_uint64 * 20),
                ("n", ctypes.c_uint64 * 20)]


_U64 = ctypes.c_uint64
# struct cp_stats of cpclient.h, field for field (it has no size field).
_STATS_HEAD = ["uptime_ms", "clients", "clients_total", "clients_rejected",
               "protocol_errors", "requests_total", "requests_active",
               "tokens_prompt", "tokens_generated", "steps", "cq_stalls",
               "kv_blocks_used", "kv_blocks_total", "kv_blocks_free",
               "requests_waiting", "requests_running", "requests_refused",
               "preemptions", "requests_paused"]
_STATS_HISTS = ["step_prefill", "step_decode", "step_seqs", "ttft_us",
                "itl_us"]
_STATS_TAIL = ["tokens_prompt_cached", "kv_blocks_cached",
               "prefix_evictions", "pace_target_us", "pace_est_us",
               "pace_meas_us", "pace_err_us", "pace_steps", "pace_missed",
               "pace_missed_us"]


class _Stats(ctypes.Structure):
    _fields_ = ([(n, _U64) for n in _STATS_HEAD] +
                [("draining", ctypes.c_int), ("disconnects", _U64 * 8)] +
                [(n, _Histogram) for n in _STATS_HISTS] +
                [(n, _U64) for n in _STATS_TAIL])


def _load():
    for path in (os.environ.get("CPCLIENT_LIBRARY"),
                 None if _LIBRARY.startswith("@") else _LIBRARY,
                 "libcpclient.so.0"):
        if not path:
            continue
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError:
            continue
    else:
        raise ImportError("cpclient: libcpclient.so.0 not found (set "
                          "CPCLIENT_LIBRARY)")
    P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    sigs = {
        "cp_connect_opts_init_v1": (None, [P, S]),
        "cp_connect_v1": (I, [P, ctypes.POINTER(P)]),
        "cp_params_init_v1": (None, [P, S]),
        "cp_submit_v1": (I, [P, ctypes.c_char_p, S, P]),
        "cp_submit_chat_v1": (I, [P, P, S, S, P]),
        "cp_next_event_v1": (I, [P, P, S, I]),
        "cp_model_info_v1": (I, [P, P, S]),
        "cp_cancel": (I, [P, I]),
        "cp_close": (None, [P]),
        "cp_stats": (I, [P, P]),
        "cp_tokenize": (I, [P, ctypes.c_char_p, S,
                            ctypes.POINTER(ctypes.c_int32), S,
                            ctypes.c_uint32]),
        "cp_strerror": (ctypes.c_char_p, [I]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


_lib = _load()


class CpError(Exception):
    """A libcpclient error or a request's ERROR event; .code is negative."""

    def __init__(self, code, what, message=None):
        self.code = code
        why = message or _lib.cp_strerror(code).decode()
        super().__init__("%s: %s" % (what, why))


def _check(r, what):
    if r < 0:
        raise CpError(r, what)
    return r


def _constrain(p, grammar, json_schema, json_output):
    """Sets p's grammar from at most one of the three keyword arguments."""
    given = [n for n, v in (("grammar", grammar is not None),
                            ("json_schema", json_schema is not None),
                            ("json_output", json_output)) if v]
    if len(given) > 1:
        raise ValueError("cpclient: only one of %s" % ", ".join(given))
    if json_output:
        p.grammar_kind = GRAMMAR_JSON
        return
    if grammar is not None:
        p.grammar_kind, text = GRAMMAR_GBNF, grammar
    elif json_schema is not None:
        p.grammar_kind = GRAMMAR_JSON_SCHEMA
        text = (json_schema if isinstance(json_schema, str)
                else json.dumps(json_schema))
    else:
        return
    b = text.encode()
    p.grammar, p.grammar_len = b, len(b)


class Event:
    """One event of a request: kind "token" or "done", text as str."""

    __slots__ = ("kind", "text", "token", "logprob", "finish", "n_prompt",
                 "n_gen", "n_cached")

    def __init__(self, ev):
        raw = ctypes.string_at(ev.text, ev.text_len) if ev.text_len else b""
        self.kind = "done" if ev.type == EVENT_DONE else "token"
        self.text = raw.decode("utf-8", "replace")
        self.token = ev.token
        self.logprob = ev.logprob
        self.finish = _FINISH.get(ev.finish) if self.kind == "done" else None
        self.n_prompt, self.n_gen = ev.n_prompt, ev.n_gen
        self.n_cached = ev.n_cached if self.kind == "done" else 0

    def __repr__(self):
        return "Event(%s, %r%s)" % (self.kind, self.text,
                                    ", " + self.finish if self.finish else "")


class Request:
    """Iterator of a request's events; close() cancels it if still running."""

    def __init__(self, client, req_id):
        self._client, self.id, self._ended = client, req_id, False

    def __iter__(self):
        return self

    def __next__(self):
        if self._ended:
            raise StopIteration
        ev = _Event()
        while True:
            _check(_lib.cp_next_event_v1(self._client._c, ctypes.byref(ev),
                                         ctypes.sizeof(ev),
                                         self._client.timeout_ms),
                   "cp_next_event")
            if ev.req_id == self.id and ev.type != EVENT_PROGRESS:
                break
        if ev.type == EVENT_ERROR:
            self._ended = True
            msg = ctypes.string_at(ev.text, ev.text_len).decode(
                "utf-8", "replace") if ev.text_len else None
            raise CpError(ev.error, "request", msg)
        if ev.type == EVENT_DONE:
            self._ended = True
        return Event(ev)

    def text(self):
        """Runs the request to its end; (text, the DONE Event)."""
        parts, last = [], None
        for last in self:
            parts.append(last.text)
        return "".join(parts), last

    def cancel(self):
        """Asks the daemon to stop; the DONE (cancelled) still comes."""
        if not self._ended and self._client._c:
            _check(_lib.cp_cancel(self._client._c, self.id), "cp_cancel")

    def close(self):
        """Cancels the request if running and reads its events to the end."""
        if self._ended or not self._client._c:
            return
        self.cancel()
        for _ in self:
            pass

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Client:
    """A connection to cpd; socket None: $CPD_SOCKET or the default."""

    def __init__(self, socket=None, timeout_ms=30000):
        self._c = None
        opts = _ConnectOpts()
        _lib.cp_connect_opts_init_v1(ctypes.byref(opts), ctypes.sizeof(opts))
        self._path = socket.encode() if socket else None
        opts.socket_path = self._path
        self.timeout_ms = timeout_ms
        c = ctypes.c_void_p()
        _check(_lib.cp_connect_v1(ctypes.byref(opts), ctypes.byref(c)),
               "cp_connect")
        self._c = c

    def close(self):
        """Disconnects; the daemon cancels what still runs."""
        if self._c:
            _lib.cp_close(self._c)
            self._c = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _params(self, max_tokens, temperature, top_p, top_k, seed, stop,
                logprobs, grammar=None, json_schema=None, json_output=False):
        p = _Params()
        _lib.cp_params_init_v1(ctypes.byref(p), ctypes.sizeof(p))
        if max_tokens is not None:
            p.max_tokens = max_tokens
        if temperature is not None:
            p.temperature = temperature
        if top_p is not None:
            p.top_p = top_p
        if top_k is not None:
            p.top_k = top_k
        if seed is not None:
            p.use_seed, p.seed = 1, seed & (2**64 - 1)
        p.logprobs = 1 if logprobs else 0
        if stop:
            stop = [stop] if isinstance(stop, str) else list(stop)
            self._stop = (ctypes.c_char_p * len(stop))(
                *[s.encode() for s in stop])
            p.stop = ctypes.cast(self._stop, _c_char_pp)
            p.n_stop = len(stop)
        _constrain(p, grammar, json_schema, json_output)
        return p

    def complete(self, prompt, max_tokens=None, temperature=None, top_p=None,
                 top_k=None, seed=None, stop=None, logprobs=False,
                 grammar=None, json_schema=None, json_output=False):
        """Submits a text prompt; a Request iterating its events."""
        p = self._params(max_tokens, temperature, top_p, top_k, seed, stop,
                         logprobs, grammar, json_schema, json_output)
        b = prompt.encode()
        r = _check(_lib.cp_submit_v1(self._c, b, len(b), ctypes.byref(p)),
                   "cp_submit")
        return Request(self, r)

    def chat(self, messages, max_tokens=None, temperature=None, top_p=None,
             top_k=None, seed=None, stop=None, logprobs=False, grammar=None,
             json_schema=None, json_output=False):
        """Submits a conversation, rendered by the daemon with the model's
        chat template: messages are (role, content) pairs or dicts with
        "role" and "content"; a Request iterating the answer's events."""
        msgs = (_Message * len(messages))()
        keep = []
        for i, m in enumerate(messages):
            role, content = ((m["role"], m["content"]) if isinstance(m, dict)
                             else m)
            if role not in _ROLES:
                raise ValueError("cpclient: unknown role %r" % (role,))
            b = (content or "").encode()
            keep.append(b)
            msgs[i].role, msgs[i].content, msgs[i].len = _ROLES[role], b, len(b)
        p = self._params(max_tokens, temperature, top_p, top_k, seed, stop,
                         logprobs, grammar, json_schema, json_output)
        r = _check(_lib.cp_submit_chat_v1(self._c, msgs, len(messages),
                                          ctypes.sizeof(_Message),
                                          ctypes.byref(p)),
                   "cp_submit_chat")
        return Request(self, r)

    def tokenize(self, text, bos=False, special=True):
        """The daemon's token ids of text (a list of ints)."""
        b = text.encode()
        flags = (1 if bos else 0) | (2 if special else 0)
        n = _check(_lib.cp_tokenize(self._c, b, len(b), None, 0, flags),
                   "cp_tokenize")
        ids = (ctypes.c_int32 * max(n, 1))()
        _check(_lib.cp_tokenize(self._c, b, len(b), ids, n, flags),
               "cp_tokenize")
        return list(ids[:n])

    def model_info(self):
        """The served model and this client's limits, as a dict."""
        mi = _ModelInfo()
        _check(_lib.cp_model_info_v1(self._c, ctypes.byref(mi),
                                     ctypes.sizeof(mi)), "cp_model_info")
        return {name: (getattr(mi, name).decode("utf-8", "replace")
                       if isinstance(getattr(mi, name), bytes)
                       else getattr(mi, name))
                for name, _ in _ModelInfo._fields_ if name != "size"}

    def stats(self):
        """The daemon's counters (struct cp_stats) as a dict; histograms
        as dicts of count, sum, max, le and n."""
        st = _Stats()
        _check(_lib.cp_stats(self._c, ctypes.byref(st)), "cp_stats")
        out = {n: getattr(st, n) for n in _STATS_HEAD + _STATS_TAIL}
        out["draining"] = bool(st.draining)
        out["disconnects"] = list(st.disconnects)
        for n in _STATS_HISTS:
            h = getattr(st, n)
            out[n] = {"count": h.count, "sum": h.sum, "max": h.max,
                      "le": list(h.le), "n": list(h.n)}
        return out
