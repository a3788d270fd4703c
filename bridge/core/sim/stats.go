package sim

import (
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Stats counts what happened in one run (or, summed, in many).
type Stats struct {
	Seeds, Actions, Messages, Deliveries, Jobs int
	Events                                     int // scheduled closures run
	SimTime                                    time.Duration

	// What the core did.
	Starts, Takeovers, Released, Uncertain, Replays, Conflicts, Cancelled               int
	Parked, Decisions, Expiries, RunsStarted, RunsFollowed                              int
	RunsReattached, RunsUnknown, RunsInterrupted, LostClaims, GaveUp, Superseded, Terms int
	// CancelsIgnored: cancel requests answered "cancelled" whose action settled otherwise.
	CancelsIgnored int
	// RecordsLeftOpen: settled actions whose record is left claimed, dispatched,
	// settling or released at quiescence (by design).
	RecordsLeftOpen int
	// Decision messages dead-lettered: for a parked action, for a run's tool approval,
	// and stray ones (for an action that never waits for one).
	DecisionsDeadLettered, RunDecisionsDeadLettered, StrayDeadLettered int
	// AskIndexLeft: ask.<id>.<k> entries (runs waiting for a tool approval) left at the
	// end; each names an action with its terminal result, which readers skip.
	AskIndexLeft int
	// StaleDecisions: decisions naming a request_id the run does not wait for.
	StaleDecisions int
	// Atomic claims of a key and a record (core.EffClaim): written, refused because one
	// of them was there, refused by the server.
	Claims, ClaimsExist, ClaimsRefused int

	// Faults injected.
	SlowOps, StaleReads, LostReplies, FailedWrites, JobCrashes, JobPauses, Panics    int
	ReplicaCrashes, ReplicaPauses, Shutdowns, Refusals, ConnRefused, HermesUncertain int
	StreamDrops, PublishFails, RunFails, Expired, Republishes, Exhausted, Forgotten  int

	// Hermes.
	Sends, Executions int
}

// Add adds o to s.
func (s *Stats) Add(o *Stats) {
	sv, ov := reflect.ValueOf(s).Elem(), reflect.ValueOf(o).Elem()
	for i := range sv.NumField() {
		f := sv.Field(i) // every count is an int, and SimTime an int64
		f.SetInt(f.Int() + ov.Field(i).Int())
	}
}

// String lists every non-zero count.
func (s *Stats) String() string {
	var parts []string
	sv := reflect.ValueOf(s).Elem()
	for i := range sv.NumField() {
		f := sv.Field(i)
		name := sv.Type().Field(i).Name
		switch {
		case name == "SimTime":
			parts = append(parts, "SimTime="+time.Duration(f.Int()).Round(time.Second).String())
		case f.Int() != 0:
			parts = append(parts, fmt.Sprintf("%s=%d", name, f.Int()))
		}
	}
	return strings.Join(parts, " ")
}

// tracer records the lines of a run's trace when enabled; a disabled tracer formats
// nothing.
type tracer struct {
	on    bool
	lines []string
	now   *time.Time
}

func (t *tracer) printf(who, format string, args ...any) {
	if !t.on {
		return
	}
	t.lines = append(t.lines, fmt.Sprintf("%12s %-20s %s", rel(*t.now).Round(time.Microsecond), who, fmt.Sprintf(format, args...)))
}
