"""How a rank's process ends off the happy path, tried on real processes that leave through
the interpreter's exit (rank_job.py), not the test harness's os._exit: a rank whose peer is
stuck (alive, asleep) raises gradwire.TimeoutError within the timeout and its process then
exits at once, with no signal; a program that set SIGPIPE to its default keeps it (and its
children inherit it), and a dead peer still makes the survivor raise rather than die by
SIGPIPE."""
import os
import subprocess
import sys
import threading
import time

import pytest

from ranks import free_port

HERE = os.path.dirname(os.path.abspath(__file__))


class Rank:
    """A rank_job.py process and its output, read as it comes (threads)."""

    def __init__(self, rank, world, port, args, timeout_s):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank),
                   WORLD_SIZE=str(world), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
        if timeout_s is not None:
            env["GRADWIRE_TIMEOUT"] = str(timeout_s)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "rank_job.py")] + [str(a) for a in args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out, self.err = [], []
        self.readers = [threading.Thread(target=self._read, args=(f, lines), daemon=True)
                        for f, lines in ((self.proc.stdout, self.out),
                                         (self.proc.stderr, self.err))]
        for r in self.readers:
            r.start()

    @staticmethod
    def _read(f, lines):
        for line in f:
            lines.append(line.rstrip("\n"))

    def stamp(self, word):
        """(time, line) of the first output line starting with `word`, else (None, None)."""
        for line in list(self.out):
            if line.startswith(word + " "):
                return float(line.split()[1]) if word != "sigpipe" else None, line
        return None, None

    def wait_for(self, word, deadline):
        while time.monotonic() < deadline and self.stamp(word)[1] is None:
            time.sleep(0.05)
        return self.stamp(word)

    def end(self, deadline):
        """The exit code (None: killed at the deadline) and the monotonic time it was seen
        gone."""
        code = None
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                break
            time.sleep(0.05)
        gone = time.monotonic()
        if code is None:
            self.proc.kill()
        self.proc.wait()
        for r in self.readers:
            r.join(timeout=5)
        return code, gone

    def stderr_tail(self):
        return "\n".join(self.err[-30:])


def launch(world, *args, timeout_s=None):
    port = str(free_port())
    return [Rank(r, world, port, args, timeout_s) for r in range(world)]


@pytest.mark.parametrize("mode", ["ddp", "diloco"])
def test_a_rank_whose_peer_is_stuck_raises_and_exits_promptly(mode):
    timeout, sleep = 4.0, 40.0
    ranks = launch(2, mode, 1, sleep, timeout_s=timeout)
    try:
        code, gone = ranks[0].end(time.monotonic() + 90)
    finally:
        ranks[1].proc.kill()
        ranks[1].end(time.monotonic() + 5)
    asleep, _ = ranks[1].stamp("sleeping")
    raised, line = ranks[0].stamp("raised")
    assert asleep is not None, ranks[1].out
    assert raised is not None, (code, ranks[0].out, ranks[0].stderr_tail())
    # The hook (or DiLoCo) raised within its timeout (and the progress probe) ...
    assert "TimeoutError" in line and "rank 1" in line, line
    assert raised - asleep < 2 * timeout + 5, (raised - asleep, line)
    # ... and the process ended at once, through the interpreter's exit (an uncaught
    # exception: code 1), not by a signal, long before the peer woke.
    assert code == 1, (code, ranks[0].stderr_tail())
    assert gone - raised < 10, (gone - raised, ranks[0].stderr_tail())
    assert gone - asleep < sleep / 2, gone - asleep


def test_sigpipe_stays_as_the_program_set_it_and_a_dead_peer_still_raises():
    # Both set SIGPIPE to its default. Rank 0 sleeps before its step 3 while rank 1 waits
    # for it in that step's exchange; rank 1 is killed then, so that rank 0 wakes into a
    # closed connection: its write must fail as an error naming rank 1, not kill it.
    ranks = launch(2, "ddp", 0, 8.0, "--sigpipe-default", timeout_s=20)
    deadline = time.monotonic() + 90
    try:
        ranks[0].wait_for("sleeping", deadline)
        ranks[1].wait_for("sigpipe", deadline)
        time.sleep(1)  # rank 1 inside step 3's exchange
        ranks[1].proc.kill()
        code, _ = ranks[0].end(deadline)
    finally:
        for r in ranks:
            r.proc.kill()
            r.end(time.monotonic() + 5)
    for r in ranks:
        _, line = r.stamp("sigpipe")
        assert line == "sigpipe default default", (line, r.out, r.stderr_tail())
    _, raised = ranks[0].stamp("raised")
    # rank 1 had reached the exchange (it published its progress), so the closed connection
    # is the cause named
    assert raised is not None and "Connection closed by peer" in raised, (
        code, ranks[0].out, ranks[0].stderr_tail())
    # The threads that write to gradwire's sockets block SIGPIPE (the group's worker, the
    # Gloo device's loop): at least two on each rank.
    assert int(ranks[0].stamp("threads")[1].split()[1]) >= 2, ranks[0].out
    assert code == 1, (code, ranks[0].stderr_tail())  # the exception, not SIGPIPE (-13)
