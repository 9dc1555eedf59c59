"""The client against a real stasisd (integration TestPythonClient runs it):
STASIS_SOCKET is its socket, STASIS_TEMPLATE a template of the counter test
actor (/counter incr|get)."""

import os
import threading
import unittest

import stasis
from stasis import pb


class LiveTest(unittest.TestCase):
    def setUp(self):
        self.client = stasis.Client(os.environ["STASIS_SOCKET"])
        self.template = os.environ["STASIS_TEMPLATE"]

    def tearDown(self):
        self.client.close()

    def counter(self, id, cmd):
        res = self.client.exec(id, ["/counter", "await", cmd])
        self.assertEqual(res.exit_code, 0, res.stderr)
        return res.stdout.strip()

    def test_lifecycle(self):
        c = self.client
        a = c.run(self.template, "py1")
        self.assertIsInstance(a, pb.Actor)  # the generated messages are the client's types
        self.assertEqual((a.id, a.state), ("py1", "RUNNING"))
        self.assertIn("py1", [x.id for x in c.actors()])
        before = self.counter("py1", "incr")

        history = []
        follow = threading.Thread(target=lambda: history.extend(c.events("py1")))
        follow.start()

        s = c.suspend("py1")
        self.assertEqual(s.state, "SUSPENDED")
        self.assertTrue(s.snapshot.id)
        with self.assertRaises(stasis.FailedPrecondition) as refused:
            c.pause("py1")
        self.assertEqual(refused.exception.category, "failed_precondition")
        self.assertIn("SUSPENDED", refused.exception.message)
        r = c.resume("py1")
        self.assertEqual(r.state, "RUNNING")
        self.assertEqual(c.inspect("py1").state, "RUNNING")
        self.assertEqual(self.counter("py1", "get"), before)

        d = c.delete("py1")
        self.assertTrue(d.deleted)
        follow.join(timeout=60)
        self.assertFalse(follow.is_alive(), "following the events did not end with the actor")
        steps = {(e.operation != "", e.step) for e in history}
        for step in ("checkpoint", "restore", "probe"):
            self.assertIn((True, step), steps, f"no {step} among the events followed")
        self.assertTrue(all(e.actor == "py1" for e in history))

    def test_errors_carry_their_category(self):
        c = self.client
        with self.assertRaises(stasis.NotFound) as missing:
            c.inspect("no-such-actor")
        self.assertEqual(missing.exception.category, "not_found")
        self.assertIn("no-such-actor", str(missing.exception))
        with self.assertRaises(stasis.InvalidArgument):
            c.run(self.template, "Not A Valid Id")
        with self.assertRaises(stasis.StasisError) as any_error:
            c.run("no-such-template", "py2")
        self.assertEqual(any_error.exception.category, "not_found")

    def test_unreachable(self):
        with stasis.Client(os.environ["STASIS_SOCKET"] + ".none", timeout=5) as gone:
            with self.assertRaises(stasis.Unavailable):
                gone.actors()


if __name__ == "__main__":
    unittest.main()
