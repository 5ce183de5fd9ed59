"""test_cpclient.py - the cpclient Python module against a running cpd.

Run by check_python with, in the environment: CPD_SOCKET (the daemon, on
aidreams260K rendering chat in Llama 2's format), CPD_PID (killed by the
last test), CP_TEXT_REF (llama.cpp's greedy continuation of "Once upon a
time"), CP_CHAT_REF (cpq --chat's greedy answer to CHAT, 24 tokens) and
CP_N_PROMPT (the prompt's tokens, BOS included).
"""
import errno
import json
import os
import signal
import time
import unittest

import cpclient

CHAT = [("system", "Tell a story."), ("user", "Once upon a time")]


class TestClient(unittest.TestCase):
    def setUp(self):
        self.c = cpclient.Client(os.environ["CPD_SOCKET"])

    def tearDown(self):
        self.c.close()

    def test_complete(self):
        text, done = self.c.complete("Once upon a time", max_tokens=32,
                                     temperature=0).text()
        self.assertTrue(len(text) > 0)
        self.assertTrue(os.environ["CP_TEXT_REF"].startswith(text), text)
        self.assertEqual(done.kind, "done")
        self.assertEqual(done.finish, "length")
        self.assertEqual(done.n_gen, 32)
        self.assertEqual(done.n_prompt, int(os.environ["CP_N_PROMPT"]))

    def test_chat(self):
        req = self.c.chat(CHAT, max_tokens=24, temperature=0, logprobs=True)
        events = list(req)
        self.assertEqual("".join(e.text for e in events),
                         os.environ["CP_CHAT_REF"])
        self.assertTrue(all(e.logprob <= 0 for e in events[:-1]))
        self.assertEqual(events[-1].n_gen, 24)
        dicts = [{"role": r, "content": t} for r, t in CHAT]
        text, _ = self.c.chat(dicts, max_tokens=24, temperature=0).text()
        self.assertEqual(text, os.environ["CP_CHAT_REF"])
        with self.assertRaises(ValueError):
            self.c.chat([("robot", "x")])

    def test_tokenize(self):
        ids = self.c.tokenize("Once upon a time", bos=True)
        self.assertEqual(len(ids), int(os.environ["CP_N_PROMPT"]))
        self.assertEqual(ids[0], self.c.model_info()["bos"])
        self.assertEqual(self.c.tokenize("Once upon a time"), ids[1:])

    def test_cancel(self):
        # The tiny model can generate all 100 tokens before the cancel
        # reaches the daemon when this process is descheduled: that
        # request then ends by length, untouched, and the cancel is tried
        # again on a new one; every try failing to cancel fails the test.
        for _ in range(5):
            req = self.c.complete("Once upon a time", max_tokens=100,
                                  temperature=0)
            first = next(req)
            self.assertEqual(first.kind, "token")
            req.cancel()
            done = list(req)[-1]
            if done.finish != "length":
                break
            self.assertEqual(done.n_gen, 100)
        self.assertEqual(done.finish, "cancelled")
        self.assertLess(done.n_gen, 100)
        # The connection serves the next request.
        text, _ = self.c.complete("Once upon a time", max_tokens=4,
                                  temperature=0).text()
        self.assertTrue(os.environ["CP_TEXT_REF"].startswith(text))

    def test_stats(self):
        self.c.complete("Once", max_tokens=2).text()
        st = self.c.stats()
        self.assertGreaterEqual(st["requests_total"], 1)
        self.assertGreaterEqual(st["clients"], 1)
        self.assertEqual(st["kv_blocks_free"] + st["kv_blocks_used"],
                         st["kv_blocks_total"])
        self.assertEqual(len(st["ttft_us"]["le"]), 20)
        self.assertFalse(st["draining"])

    def test_errors(self):
        with self.assertRaises(cpclient.CpError) as cm:
            cpclient.Client(os.environ["CPD_SOCKET"] + ".none")
        self.assertIn(cm.exception.code, (-errno.ENOENT, -errno.ECONNREFUSED))
        with self.assertRaises(cpclient.CpError) as cm:
            self.c.complete("x", temperature=-1)
        self.assertEqual(cm.exception.code, -errno.EINVAL)

    def test_json_output(self):
        """The grammars: whole JSON, a schema's object, GBNF's words."""
        text, done = self.c.complete("Once upon a time", max_tokens=60,
                                     temperature=0, json_output=True).text()
        json.loads(text)
        self.assertEqual(done.finish, "stop")
        text, done = self.c.chat(CHAT, max_tokens=60, temperature=0,
                                 json_output=True).text()
        json.loads(text)
        self.assertEqual(done.finish, "stop")
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}},
                  "required": ["ok"], "additionalProperties": False}
        for s in (schema, json.dumps(schema)):
            text, done = self.c.chat(CHAT, max_tokens=80, temperature=0,
                                     json_schema=s).text()
            self.assertEqual(done.finish, "stop", text)
            obj = json.loads(text)
            self.assertEqual(list(obj), ["ok"])
            self.assertIsInstance(obj["ok"], bool)
        text, done = self.c.complete("Once upon a time", max_tokens=20,
                                     grammar='root ::= ("yes" | "no") "."'
                                     ).text()
        self.assertIn(text, ("yes.", "no."))
        self.assertEqual(done.finish, "stop")
        with self.assertRaises(ValueError):
            self.c.complete("x", grammar="root ::= \"a\"", json_output=True)

    def test_grammar_errors(self):
        """A grammar the daemon cannot compile: CpError naming the rule."""
        with self.assertRaises(cpclient.CpError) as cm:
            self.c.complete("x", max_tokens=4,
                            grammar="root ::= item+").text()
        self.assertEqual(cm.exception.code, -errno.EINVAL)
        self.assertIn("'item'", str(cm.exception))
        with self.assertRaises(cpclient.CpError) as cm:
            self.c.chat(CHAT, max_tokens=4, json_schema={
                "type": "object",
                "properties": {"age": {"type": "int"}}}).text()
        self.assertEqual(cm.exception.code, -errno.EINVAL)
        self.assertIn("#/properties/age/type", str(cm.exception))
        # The connection serves the next request.
        text, _ = self.c.complete("Once upon a time", max_tokens=4,
                                  temperature=0).text()
        self.assertTrue(os.environ["CP_TEXT_REF"].startswith(text))

    def test_zz_dead_daemon(self):
        """Last: the daemon killed mid-stream; the client raises EDEAD."""
        req = self.c.complete("Once upon a time", max_tokens=100)
        next(req)
        os.kill(int(os.environ["CPD_PID"]), signal.SIGKILL)
        try:
            for _ in req:
                pass
        except cpclient.CpError as e:
            self.assertEqual(e.code, cpclient.EDEAD)
        deadline = time.monotonic() + 20
        with self.assertRaises(cpclient.CpError) as cm:
            while time.monotonic() < deadline:
                self.c.complete("x", max_tokens=1).text()
                time.sleep(0.05)
        self.assertEqual(cm.exception.code, cpclient.EDEAD)

if __name__ == "__main__":
    unittest.main(verbosity=2)
