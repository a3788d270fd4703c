// Package sim is a deterministic simulator of hermes-bridge replicas running the
// production core (bridge/core.Job), never a copy of its logic.
//
// A World holds three replicas that share one JetStream consumer, a KV bucket of
// records, the output stream's result log, and a Hermes Agent API, all simulated and
// all driven by one scheduler: simulated time from a fixed origin, a queue of events
// ordered by (time, insertion sequence), and one PCG source seeded by the seed. Nothing
// reads a clock, starts a goroutine or iterates a map to decide anything, so a seed
// replays bit for bit (Run with Options.Trace prints every event, effect and answer).
//
// Each job (a delivery of an action or a decision, a sweeper's expiry, a cancel
// answered from the records) is a core.Job; its driver (driver.go) carries out the
// effects it returns exactly as bridge/core/io.go says; the endpoint's circuit breaker
// is the bridge's own (core.Breaker). Faults are drawn per seed: slow, stale, failed
// and lost-reply store operations; records and results that age out; jobs that crash,
// pause or panic at hooks and before store operations, and pause right before a
// result's append (the window where a paused owner races its taker); replicas that
// crash, pause or shut down; a finite MaxDeliver in half the seeds; Hermes refusing
// (429), refusing connections, resetting them after the work, dropping streams; runs
// that fail. Three kinds of world come from generators of their own, so that a seed
// without them plays as it did before they existed: atomic claims (Options.Claims); a
// lapsed key (Options.Lapse: a governed run whose only delivery dies after the run, its
// key lapsing; a same-key action claiming it; the run published again); and zombies
// (Options.Zombies: owners paused before their results in most deliveries, more
// refusals and failed event stores, runs durably idempotent). Each is drawn per seed
// unless the options say.
//
// After quiescence the invariants (invariants.go) are checked: one truthful terminal
// result per action, at most one execution per unsafe action and per scoped key,
// replays and conflicts where the keys say, approvals and cancels honoured, runs never
// outcome_unknown where they could be followed, no claim taken over before its
// revision stood still for a lease, records that outlive their results, nothing left
// behind. An action the bridge may have forgotten (its records expired, and its result
// aged out or never came, before a re-publish) is judged by its life since the
// re-publish; results and pending results are judged against what the log kept when
// they were stored (a second one after the first aged out is not two at once).
//
// A read that is behind returns an older version, never one past its TTL (each replica
// ages messages out by its own clock), and with an unbounded lag prefers one whose
// state differs from the current one.
//
// TestMutants (make mutants) plants one bug per class of promise in the core, and each
// bug the simulator found, and wants each caught: the simulator's own test.
package sim
