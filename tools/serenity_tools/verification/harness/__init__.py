"""``serenity-allocator harness``: reliability scenarios on the local stack, with real processes.

One module per scenario (:mod:`.concurrency`, :mod:`.standard_queue`, :mod:`.crash`,
:mod:`.faults`, :mod:`.poison`, :mod:`.sweep_crash`), picked by name in :mod:`.scenarios`; the
pieces they share: :mod:`.config`, :mod:`.workload`, :mod:`.poison_bodies`, :mod:`.drain`,
:mod:`.worker_releases`, :mod:`.analysis` (checks over a run, see :mod:`..checks`),
:mod:`.results`, and :mod:`.handlers` (run inside the consumer processes). The command line is
:mod:`.cli`.

Each scenario starts a fresh :class:`.stack.LocalStack` (moto in its own single-threaded
process, the Semrush simulator, the template's resources), seeds an org, lets C consumer
processes (stand-ins for Lambda containers, :mod:`.consumer`) drain a workload through the real
handler, and checks what the run left behind with :mod:`.invariants`:

- ``concurrency``: N children, M requests (ensures, coalescable bursts, releases between
  ensures) over three pools: a roomy metered one, an unmetered one (ensures complete
  ``unmetered`` with zero transfers) and a tight one whose ensures go through the exact-need
  fallback, park for sibling reclaim and trip the pool early warning. Every invariant holds,
  plus the broker checks (a broker violation is reported as the BROKER's).
- ``standard-queue``: the same workload through a STANDARD queue on the same moto, consumed by
  the same consumer processes running a worker that trusts the body (the event's
  MessageGroupId filled from ``workspace_id``). Its violations are counted and reported, not
  required to be zero: this is the evidence for the FIFO design.
- ``crash``: consumers SIGKILL themselves at random points (before the handler, during it,
  after it before the delete, and in the middle of outcome publishing) and are restarted;
  redelivery converges with every invariant intact; a replay after a traced crash is
  explained (at-least-once) and reported, any other duplicate is a violation.
- ``faults``: the simulator injects 5xx, 429, timeouts and not-ready answers at set rates, with
  a not-ready window after each transfer and one stuck zombie child; every request ends in a
  terminal outcome or the DLQ (the zombie's only), within MAX_RECEIVE_COUNT receives.
- ``poison``: malformed and invalid bodies mixed into the stream; none reaches Semrush, each
  lands in the DLQ with its reason, and valid requests are not delayed (compared with the same
  workload without poison).
- ``sweep-crash``: the Sweep handler (in-process) dies between targets and around its
  checkpoint writes and is resumed by run id once its lease has passed; no child is enqueued
  twice and the checkpoint always parses, without duplicates.

Every scenario runs with the allocation features ON (:data:`.config.FEATURES_ON`). Producers
are paced: moto's FIFO receive and send scan the whole queue, so a deep backlog would measure
moto, not the system; the feeder keeps at most ``10 x C + 30`` messages un-deleted, sending
each child's requests in order.
"""
