"""The pull-based fan-out pool that embeds an index job over every allowed provider at once.

One job is one shared queue of items (text indices). Each provider runs its own worker loop
("lane"; a provider may have several) and pulls a batch only when it has capacity, so a fast
GPU simply comes back more often than a slow one and nobody is handed work it cannot do.
What the pool guarantees, whatever fails:

- Every item is written exactly once. A batch that fails, or whose provider drops, goes back
  to the FRONT of the queue. A batch duplicated to beat a straggler is written by whichever
  copy finishes first; the other result is discarded, never written.
- A throttled cloud provider holds no work while it waits. The budget's permit is taken
  BEFORE items are pulled (`admission`), and after a 429/402 the batch goes back to the queue
  and that provider pauses pulling for the cooldown, while the locals keep pulling.
- A provider that keeps failing (other than rate limits) is ejected and re-probed later with
  one small batch, on an exponential backoff that grows once per failure episode (the batches
  its other lanes had in flight when it was ejected fail with it, and count as that episode).
- The end of a job is not held hostage: near the end each lane pulls its part of a plan in
  which every lane finishes as early as it can, together (a lane that would finish after the
  others finish everything pulls nothing), and when the queue is empty an idle provider
  duplicates a batch that has been in flight much longer than its provider's own history
  predicts for a batch of that size.
- Under backup the cloud pulls only while no local provider can serve, and stops pulling
  (mid-job) as soon as one can again.

Batch size adapts per provider to a target batch latency: it starts small (or, given a
`history`, where the provider's last job left it), follows the measured seconds per item, at
most doubling per batch, within [min_batch, max_batch]. A cloud provider whose key has a
known request rate sends batches large enough that its requests, not its lanes, are spent
(`rate_limit`; up to max_batch for a low RPM). Each provider's latency is kept as a line,
fixed cost plus cost per item, so a straggler is judged against what its own provider takes
for a batch of that size.

A provider that refuses a batch as too large (a per-request input limit: `is_too_large`) gets
a ceiling: its batch is halved, the refused items go back to the queue front, and no growth,
rate floor or later success takes it past that size again (`Sizing.ceiling`, kept across
restarts with the rest of the history). A size the provider never served is tried by one lane
at a time, so a limit costs one refused request, not one per lane.

The pool refuses to decide who may serve (its `eligible` predicate comes from the router),
to know what a permit is made of (the budget's `admission` hands them out), or to write rows
(the job's `sink` does, once per finished batch, serialised so the store sees one writer).

The package, in three parts cut along what each does to a job: `plan` (what a lane does next,
and all that decision reads: `PoolOptions`, the job's state with each provider's standing,
what is learned of a provider's speed and the batch-size rules; it decides and keeps the
record, and never calls a provider),
`lanes` (the worker tasks: they act on the plan, take permits, embed, write, and settle each
outcome, sorting how a batch went wrong), and `core` (`Pool`, the face that holds them, with
its `Members`, who joins and leaves). The job's state sits with the plan rather than with the
lanes that change it because the planner reads it and the lanes import the planner: the
imports then run one way, core to lanes to plan.
"""

from fathom.inference.pool.core import Pool, PoolStalled
from fathom.inference.pool.lanes import MalformedBatch, is_throttle, is_too_large
from fathom.inference.pool.plan import (
    FIXED_SHARE,
    MIN_PER_ITEM,
    STRETCH,
    Admission,
    LatencyLine,
    PoolOptions,
    PoolReport,
    Progress,
    Sink,
    Sizing,
)

__all__ = [
    "FIXED_SHARE",
    "MIN_PER_ITEM",
    "STRETCH",
    "Admission",
    "LatencyLine",
    "MalformedBatch",
    "Pool",
    "PoolOptions",
    "PoolReport",
    "PoolStalled",
    "Progress",
    "Sink",
    "Sizing",
    "is_throttle",
    "is_too_large",
]
