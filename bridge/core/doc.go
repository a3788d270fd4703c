// Package core decides, for one action, every step of its life: a pure state machine in
// the spirit of etcd raft's Step. A [Job] takes an [Event] (a delivery, the answer of a
// store, log, Hermes or run operation, a timer, a heartbeat, a cancel request, shutdown,
// a panic) and returns the [Effect]s to carry out (store and log operations, the Hermes
// request, run operations, timers, heartbeats, hooks, log notes, the message's ack, nak
// or term). It does no I/O, reads no clock (an event carries its time) and starts no
// goroutine; its randomness (retry jitter) comes from a seed in the delivery. The bridge
// is one driver of it (package bridge, driver.go), the simulator another (core/sim): both
// run this code, and nothing else decides what an action does.
//
// # The facts
//
// Everything a job decides rests on four kinds of stored facts, each written only with
// a compare-and-set:
//
//   - the action record act.<id> (KV): who holds the claim (Owner), and how far it went
//     (State);
//   - the key record idem.<sha256(capability, key)> (KV): which action holds a caller's
//     idempotency key;
//   - the park index park.<id> (KV): a parked action, for the sweeper;
//   - the result log: the action's result messages in the output stream, appended with
//     an expected last subject sequence. <id>:pending and <id>:pending:<k> (status
//     pending_approval) are not terminal; <id>:result is. Whether a message is terminal
//     is read from its status (LogEntry.Terminal), never from its message id. The
//     terminal result is the action's end: no record is updated after it, so the
//     action record keeps saying dispatched (claimed for a safe call) after the action
//     settled, and whoever asks (the status endpoint) reads the log for the end. One
//     write fewer per action; the log's append is what decides anyway.
//
// The one-write start's key and record go to the store as one atomic batch where it
// takes one (Config.AtomicClaim): both written or neither, so a crash leaves both or
// nothing; a batch refused as a whole wrote nothing, and the job claims the key on its
// own (the same path as without batches).
//
// KV reads (Get) may be behind on a cluster; log reads (ReadLog) are answered by the
// stream's leader and are not. So a job never concludes "no result" or "the key is
// free" from a Get: it reads the log, and a write (Create, Update, Append) settles who
// won. The driver keeps an action record longer than its result (every result is
// appended after a write of its record, and the record's TTL is the log's plus a
// margin), and a key no longer than its holder's result: so a record created afresh
// proves that the action has no stored result (no read needed before the call), and a
// key's holder's result is in the log as long as the key lives.
//
// # Record transitions
//
// Each arrow is one compare-and-set, by the job named; a renewal (heartbeat) rewrites the
// record in its state to move its revision.
//
//	from            to                  by                                        write
//	(none)          claimed             begin: claim the id                       Create act
//	(none)          dispatched          one-write start (after the key's Create)  Create act
//	(none)          dispatched + key    one-write start, atomic claim (EffClaim)  Create idem and act,
//	                held                                                          one batch
//	claimed         dispatched          the write-ahead mark, before the request  Update act
//	claimed,        released            a certain failure (nothing ran), to be    Update act
//	dispatched                          retried
//	claimed,        settling            the fence before a result that says       Update act
//	dispatched                          nothing ran (a claimed record: any
//	                                    result reached without a call)
//	claimed         parked              parking for approval (after proof, index  Update act
//	                                    and the pending message)
//	parked          claimed + decision  a decision, or the approval's expiry      Update act
//	released        claimed             the next delivery                         Update act
//	claimed,        claimed (new owner) a takeover: the revision stood still for  Update act
//	dispatched,                         a lease (dispatched: the outcome is
//	settling                            uncertain; settling: fenced, never sent)
//	any not parked  + cancel            a cancel with no reachable owner          Update act
//	parked          claimed + cancel    a cancel of a parked action               Update act
//	(none)          settled (cancelled) a cancel before its action arrives        Create act
//	settled         settled             a delivery about to append the tombstone's Update act
//	                                    result (so the record outlives it)
//	(none)          key held            claiming the idempotency key              Create idem
//	key held        (none)              the holder's result frees it (FreesKey)   Delete idem
//	any             terminal result     settling                                  Append log
//
// # The job's transitions
//
// A job's main flow awaits one answer at a time; what it awaits is a row of the
// transition table (table.go: one K per row, its name, and the step that takes the
// answer). The rows are grouped as the flow goes: the one-write start, the ordinary
// path (claim the id, or examine, wait for and take over the record that holds it),
// claimed (validate, decide, key, admit, mark, call), settling, parking, heartbeats,
// decisions and expiries, cancels answered from the records, a panic, and the governed
// run (start, bind, follow, poll, stop, tool approvals). Every job takes beats, cancels,
// shutdown and panics the same way, whatever row it is in (Step).
//
// # What it promises, and the rule behind each
//
//   - An unsafe call is sent at most once per action id: only by the owner of a record
//     that it marked dispatched itself (a Create or an Update on the revision it owns);
//     a job that takes over a dispatched record never sends (it settles
//     outcome_unknown, or follows the run the record names), nor one that takes over a
//     settling record (fenced).
//   - At most once per scoped idempotency key: the key is claimed with a Create; its
//     holder's terminal result decides for every later action (replay, or conflict);
//     it is freed only by a result that is retryable and certain (nothing reached
//     Hermes), with a compare-and-set Delete. A key held by another action decides
//     nothing for an action already dispatched (its key expired while it had no
//     result): that one carries on without it. A key found by a read naming the action
//     itself (an earlier delivery claimed it) is proven by a compare-and-set renewal
//     before the action is marked dispatched: the read may be a lease's wait old, and
//     the key may have lapsed since.
//   - Exactly one terminal result per identified action: the result is an Append on the
//     action's last sequence, so one wins; a job ends without one only by handing the
//     action on (a nak: the message is delivered again; its claim taken over by a
//     delivery that settles it; parked, for the decision's delivery, or the sweeper's
//     expiry, to carry on) or after reading a terminal result in the log. A job that
//     holds no claim stores nothing (a last resort settles only under a claim), and a
//     result that says nothing ran is stored only under the fence, so that no delivery
//     paused past the lease stores it after its taker sent the action. A job follows a
//     pending message it did not append only after proving its claim.
//   - Nothing waits unbounded: every wait and timer carries Until, and every store and
//     log request is bounded by Config.StoreBound, so that a renewal is never held
//     behind a request to a server that stopped answering.
//
// # Tests
//
// The scripts in testdata (run by TestScripts with github.com/cockroachdb/datadriven;
// go test ./bridge/core -rewrite updates them) drive one job event by event and show
// its effects and state; each finding of the review that led to this package is a
// script named after it. The simulator (core/sim) runs jobs on simulated replicas,
// store, result log, consumer and Hermes with faults, under a deterministic scheduler,
// and checks the promises above after quiescence; a seed replays bit for bit.
package core
