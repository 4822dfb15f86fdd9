"""DDP's PowerSGD hook over several buckets, made safe on Gloo (--powersgd-buckets ddp).

powerSGD_hook sends its second allreduce (Q) from the callback of its first (P). With more
than one bucket, DDP starts bucket k+1's hook on the autograd thread while bucket k's Q is
sent from a Gloo thread, so ranks can hand Gloo their collectives in different orders, and
Gloo aborts ("op.preamble.length <= op.nbytes", seen on cnn-wide). The peer therefore ran
PowerSGD in one bucket, which leaves no overlap with backward.

in_bucket_order(hook) runs each bucket's hook once the bucket before it has finished, so
every rank issues P0 Q0 P1 Q1 ... in that order (DDP hands the buckets over in index
order), while bucket 0's exchange still overlaps the rest of backward. It changes the
order of the collectives, not what they compute.
"""

import torch


def in_bucket_order(hook):
    """A DDP communication hook that runs `hook` bucket after bucket."""
    chain = {"last": None}

    def ordered(state, bucket):
        before = chain["last"] if bucket.index() > 0 else None
        out = torch.futures.Future()

        def finish(done):
            try:
                out.set_result(done.value())
            except Exception as e:  # the exchange failed: DDP raises it on this rank
                out.set_exception(e)

        def start(previous=None):
            try:
                if previous is not None:
                    previous.wait()  # the bucket before failed: so does this one
                hook(state, bucket).then(finish)
            except Exception as e:
                out.set_exception(e)

        if before is None:
            start()
        else:
            before.then(start)
        chain["last"] = out
        return out

    return ordered
