package core

// K names what the job awaits: the answer of one effect, and the step that takes it.
// Each K is one row of the transition table below, which is the whole of a job's life
// once it has started (deliver) besides the events every job takes the same way (beats,
// cancels, shutdown, panics: see Step).
type K uint8

// The rows, in flow order.
const (
	kNone K = iota

	// The one-write start of an unsafe action with nothing to decide first.
	kValidateStart   // Validate → invalid: begin (claimed, then settled invalid); valid: Admit without waiting
	kAdmitStart      // Admit → slot: the key (startKey); busy or paused: begin
	kStartClaim      // Create idem and act dispatched in one batch → the call; refused or exists: the key first
	kStartClaimCheck // answer lost: Get act → this job's owner: the key's revision; another's: begin; none: wait, again
	kStartClaimWait  // the backoff between those reads
	kStartClaimKey   // Get idem (the claim's own) → the call
	kStartKeyCreate  // Create idem → Create act dispatched; held: read it
	kStartKeyGet     // Get idem → this action's: Create act dispatched; another's: begin with it seen; gone: create again
	kStartRecord     // Create act dispatched → the call; exists: begin

	// The ordinary path: claim the id, or decide about the record that holds it.
	kBeginCreate   // Create act claimed → claimed; exists: examine
	kExamineGet    // Get act → settled (a cancel came first): keep it (kTombKept); else ReadLog; gone: begin
	kExamineLog    // ReadLog → terminal: done; parked: ack; released: take it; owned: AwaitMove a lease
	kExamineReread // timer → Get act again (a read behind one the job made says nothing)
	kTombKept      // Update act settled (its tombstone, rewritten) → settle its result; conflict: reread; gone: begin
	kTakeReleased  // Update act claimed → claimed; conflict: examine
	kOwnerWait     // AwaitMove → moved: examine; terminal: done; a lease stood still: ReadLog (kLeaseLog)
	kLeaseLog      // ReadLog → terminal: done; none: take over; failed: retry (the wait is kept)
	kLeaseLogRetry // timer → ReadLog again
	kTakeOver      // Update act owner → claimed (dispatched: uncertain; settling: fenced); conflict: examine

	// Claimed.
	kValidateClaimed // Validate → invalid: settle failed; valid: proceed (decision, approval, execute)
	kKeyCreate       // Create idem → held: admit; held by another: read it
	kKeyGet          // Get idem → examine the holder; gone: create again
	kKeyHolderLog    // ReadLog holder → terminal: decide (free, conflict, replay); running: wait for it
	kKeyHolderWait   // WaitTerminal holder → terminal: decide; deadline: settle deadline_exceeded
	kKeyFree         // Delete idem (the holder's result freed it) → create again
	kAdmit           // Admit, waiting → slot: dispatch (unsafe) or call (safe); paused: release or settle
	kDispatched      // Update act dispatched (the mark) → call; cancel flag: settle cancelled; lost: stop
	kCall            // Call → settle the answer, or release for a retry, or stop (lost claim)
	kReleased        // Update act released → nak
	kLostWait        // WaitTerminal → the taker's result: ack; else nak

	// Settling.
	kFenced         // Update act settling (the fence) → Append; lost: stop
	kFenceRetry     // timer → the fence again
	kAppended       // Append the result → free the key, unpark, ack; conflict: read the log
	kAppendConflict // ReadLog → a terminal result (ours, or another's: superseded); a pending one: prove the claim, or append after it
	kAppendProve    // Update act (the claim proved) → Append after the pending message; lost: stop
	kAppendRetry    // timer → Append again
	kAppendReread   // timer → ReadLog (kAppendConflict) again
	kKeyFreed       // Delete idem → unpark
	kUnparkGet      // Get park → Delete it
	kUnparkDel      // Delete park → ack

	// Parking.
	kParkProved     // Update act (the proof) → Create park; cancel flag: settle cancelled
	kParkIndex      // Create park → Append the pending message
	kParkPending    // Append pending → park the record; conflict: read the log
	kParkPendingLog // ReadLog → terminal: ack; the pending message: park the record
	kParked         // Update act parked → ack

	// Heartbeats (beside the main flow).
	kRenewed    // Update act (renewal) → the key's renewal
	kKeyRenewed // Update idem → adopt; refused or unknown: read it back
	kKeyReread  // Get idem → still ours: adopt; else the key is not ours to renew

	// Decisions and expiries.
	kDecGet       // Get act → ReadLog (settled: moot)
	kDecLog       // ReadLog → terminal: moot; a bound run: answer its approval; parked: decide; decided: as a delivery; parking: wait briefly
	kDecParkWait  // AwaitMove → moved: read again; else: early (retry, then dead-letter)
	kDecided      // Update act (the decision) → Resume
	kResumed      // Resume → claimed (proceed with the decision); unresumable: settle failed
	kRunAnswered  // Update act (approval answered) → forward the choice to the run
	kRunForwarded // RunApprove → ack
	kDeadLettered // DeadLetter → term

	// Cancels answered from the records.
	kCanGet  // Get act → none: store the cancelled result (or answer unknown); settled: already_settled; else ReadLog
	kCanTomb // Create act settled → unknown
	kCanLog  // ReadLog → terminal: already_settled; parked: claim it; flagged: cancelled; else flag it
	kCanPark // Update act (decision cancel) → settle cancelled
	kCanFlag // Update act (cancel flag) → cancelled

	// A panic.
	kPanicDLQ // DeadLetter → settle failed internal (reason panic)

	// The governed run.
	kRunCapsResume  // RunCapabilities → durable: post again under the key; else settle run_start_unknown
	kRunStarted     // RunStart → bind; failed: maybe post again (durable), else as a call's failure
	kRunCapsRepost  // RunCapabilities → durable: post again after a backoff; else as a call's failure
	kRunRepost      // timer → RunStart
	kRunBound       // Update act run_id → follow; failed: retry, then follow unbound
	kRunBindRetry   // timer → bind again
	kRunStored      // RunStoredEvents → read the events from there (a taken-over run)
	kRunEvents      // RunEvents → the run's end: settle; else poll, stop, hand back or stop following
	kRunPollWait    // timer → RunStatus
	kRunPolled      // RunStatus → terminal or lost: settle; else poll again
	kRunStopped     // RunStop → poll until the stop's grace
	kRunAsked       // Update act (approval k asked: the fence) → arm its expiry, Append <id>:pending:<k>
	kRunAskAppended // Append <id>:pending:<k> → the next ask; conflict: read the log
	kRunAskLog      // ReadLog → its own (a lost reply): done; another pending: append after it
	kRunExpired     // Update act (approval k expired) → deny it on Hermes if the expiry won
	kRunAskIndex    // Create ask.<id>.<k> → Append <id>:pending:<k>
	kAskUnGet       // Get ask.<id>.<k> (the run's action settled) → Delete it, then unpark
	kAskUnDel       // Delete ask.<id>.<k> → unpark
	kDecAskUnGet    // Get ask.<id>.<k> (a decision answered approval k) → Delete it, then ack
	kDecAskUnDel    // Delete ask.<id>.<k> → ack
	kExpAskUnGet    // Get ask.<id>.<k> (the owner's expiry answered approval k) → Delete it
	kExpAskUnDel    // Delete ask.<id>.<k> → (the run goes on)
	kKeyProve       // Update idem (a key adopted from a read) → dispatch; lapsed or changed: claim the key afresh
	kRunAskCheck    // RunStatus (before approval k is asked) → it still waits for it: ask; it ended or waits for another: skip it

	numK
)

// row is a row of the transition table.
type row struct {
	name string
	step func(*Job, Event)
}

// table maps each K to its step (filled by init: the steps refer to the table).
var table [numK]row

func init() {
	table = [numK]row{
		kValidateStart:   {"validate_start", (*Job).onValidateStart},
		kAdmitStart:      {"admit_start", (*Job).onAdmitStart},
		kStartClaim:      {"start_claim", (*Job).onStartClaim},
		kStartClaimCheck: {"start_claim_check", (*Job).onStartClaimCheck},
		kStartClaimWait:  {"start_claim_wait", (*Job).onStartClaimWait},
		kStartClaimKey:   {"start_claim_key", (*Job).onStartClaimKey},
		kStartKeyCreate:  {"start_key_create", (*Job).onStartKeyCreate},
		kStartKeyGet:     {"start_key_get", (*Job).onStartKeyGet},
		kStartRecord:     {"start_record", (*Job).onStartRecord},
		kBeginCreate:     {"begin_create", (*Job).onBeginCreate},
		kExamineGet:      {"examine_get", (*Job).onExamineGet},
		kExamineLog:      {"examine_log", (*Job).onExamineLog},
		kExamineReread:   {"examine_reread", (*Job).onExamineReread},
		kTombKept:        {"tomb_kept", (*Job).onTombKept},
		kTakeReleased:    {"take_released", (*Job).onTakeReleased},
		kOwnerWait:       {"owner_wait", (*Job).onOwnerWait},
		kLeaseLog:        {"lease_log", (*Job).onLeaseLog},
		kLeaseLogRetry:   {"lease_log_retry", (*Job).onLeaseLogRetry},
		kTakeOver:        {"take_over", (*Job).onTakeOver},
		kValidateClaimed: {"validate_claimed", (*Job).onValidateClaimed},
		kKeyCreate:       {"key_create", (*Job).onKeyCreate},
		kKeyGet:          {"key_get", (*Job).onKeyGet},
		kKeyHolderLog:    {"key_holder_log", (*Job).onKeyHolderLog},
		kKeyHolderWait:   {"key_holder_wait", (*Job).onKeyHolderWait},
		kKeyFree:         {"key_free", (*Job).onKeyFree},
		kAdmit:           {"admit", (*Job).onAdmit},
		kDispatched:      {"dispatched", (*Job).onDispatched},
		kCall:            {"call", (*Job).onCall},
		kReleased:        {"released", (*Job).onReleased},
		kLostWait:        {"lost_wait", (*Job).onLostWait},
		kFenced:          {"fenced", (*Job).onFenced},
		kFenceRetry:      {"fence_retry", (*Job).onFenceRetry},
		kAppended:        {"appended", (*Job).onAppended},
		kAppendConflict:  {"append_conflict", (*Job).onAppendConflict},
		kAppendProve:     {"append_prove", (*Job).onAppendProve},
		kAppendRetry:     {"append_retry", (*Job).onAppendRetry},
		kAppendReread:    {"append_reread", (*Job).onAppendReread},
		kKeyFreed:        {"key_freed", (*Job).onKeyFreed},
		kUnparkGet:       {"unpark_get", (*Job).onUnparkGet},
		kUnparkDel:       {"unpark_del", (*Job).onUnparkDel},
		kParkProved:      {"park_proved", (*Job).onParkProved},
		kParkIndex:       {"park_index", (*Job).onParkIndex},
		kParkPending:     {"park_pending", (*Job).onParkPending},
		kParkPendingLog:  {"park_pending_log", (*Job).onParkPendingLog},
		kParked:          {"parked", (*Job).onParked},
		kRenewed:         {"renewed", (*Job).onRenewed},
		kKeyRenewed:      {"key_renewed", (*Job).onKeyRenewed},
		kKeyReread:       {"key_reread", (*Job).onKeyReread},
		kDecGet:          {"decision_get", (*Job).onDecGet},
		kDecLog:          {"decision_log", (*Job).onDecLog},
		kDecParkWait:     {"decision_park_wait", (*Job).onDecParkWait},
		kDecided:         {"decided", (*Job).onDecided},
		kResumed:         {"resumed", (*Job).onResumed},
		kRunAnswered:     {"run_answered", (*Job).onRunAnswered},
		kRunForwarded:    {"run_forwarded", (*Job).onRunForwarded},
		kDeadLettered:    {"dead_lettered", (*Job).onDeadLettered},
		kCanGet:          {"cancel_get", (*Job).onCanGet},
		kCanTomb:         {"cancel_tombstone", (*Job).onCanTomb},
		kCanLog:          {"cancel_log", (*Job).onCanLog},
		kCanPark:         {"cancel_park", (*Job).onCanPark},
		kCanFlag:         {"cancel_flag", (*Job).onCanFlag},
		kPanicDLQ:        {"panic_dlq", (*Job).onPanicDLQ},
		kRunCapsResume:   {"run_caps_resume", (*Job).onRunCapsResume},
		kRunStarted:      {"run_started", (*Job).onRunStarted},
		kRunCapsRepost:   {"run_caps_repost", (*Job).onRunCapsRepost},
		kRunRepost:       {"run_repost", (*Job).onRunRepost},
		kRunBound:        {"run_bound", (*Job).onRunBound},
		kRunBindRetry:    {"run_bind_retry", (*Job).onRunBindRetry},
		kRunStored:       {"run_stored", (*Job).onRunStored},
		kRunEvents:       {"run_events", (*Job).onRunEvents},
		kRunPollWait:     {"run_poll_wait", (*Job).onRunPollWait},
		kRunPolled:       {"run_polled", (*Job).onRunPolled},
		kRunStopped:      {"run_stopped", (*Job).onRunStopped},
		kRunAskAppended:  {"run_ask_appended", (*Job).onRunAskAppended},
		kRunAskLog:       {"run_ask_log", (*Job).onRunAskLog},
		kRunAsked:        {"run_asked", (*Job).onRunAsked},
		kRunExpired:      {"run_expired", (*Job).onRunExpired},
		kRunAskIndex:     {"run_ask_index", (*Job).onRunAskIndex},
		kRunAskCheck:     {"run_ask_check", (*Job).onRunAskCheck},
		kKeyProve:        {"key_prove", (*Job).onKeyProve},
		kAskUnGet:        {"ask_unindex_get", (*Job).onAskUnGet},
		kAskUnDel:        {"ask_unindex_del", (*Job).onAskUnDel},
		kDecAskUnGet:     {"decision_ask_unindex_get", (*Job).onDecAskUnGet},
		kDecAskUnDel:     {"decision_ask_unindex_del", (*Job).onDecAskUnDel},
		kExpAskUnGet:     {"expiry_ask_unindex_get", (*Job).onExpAskUnGet},
		kExpAskUnDel:     {"expiry_ask_unindex_del", (*Job).onExpAskUnDel},
	}
}

func (k K) String() string {
	if k < numK && table[k].name != "" {
		return table[k].name
	}
	return "none"
}

// cont takes ev with the step of row k.
func (j *Job) cont(k K, ev Event) {
	if k == kNone || k >= numK || table[k].step == nil {
		return
	}
	table[k].step(j, ev)
}

// Awaiting names the row the main flow awaits ("none" when it awaits nothing).
func (j *Job) Awaiting() string {
	if j.busy && j.cur.k != kNone {
		return j.cur.k.String()
	}
	return j.await.String()
}
