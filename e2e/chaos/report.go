package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

func (r *roundResult) line() string {
	return fmt.Sprintf("%d faults, %d actions, %d results, %d missing, %d duplicated, %d/%d duplicate calls (id/key), outcome_unknown %d (%d explained), %d out of order, other failures %s, %d calls not attributed to a process, settled %s after the last fault, ok=%v",
		len(r.faults), r.actions, r.results, r.missing, r.duplicated, r.dupCallsID, r.dupCallsKey, r.outcomeUnknown, r.explained,
		r.outOfOrder, mapString(r.otherFailed), r.unattributed, r.settleAfterFault.Round(100*time.Millisecond), r.ok())
}

func mapString(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for k, n := range m {
		out = append(out, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// faultSummary counts a round's faults by kind.
func faultSummary(fs []fault) string {
	m := map[string]int{}
	for _, f := range fs {
		m[f.kind]++
	}
	return mapString(m)
}

// printTable prints the rounds as a Markdown table, then the faults and the
// outcome_unknown causes of each round.
func printTable(w io.Writer, o options, rounds []*roundResult) {
	fmt.Fprintf(w, "\n### hermes-bridge chaos: seed %d, %d rounds of %s at %.0f actions/s, ack wait %s (lease %s)\n\n",
		o.seed, o.rounds, o.duration, o.rate, o.ackWait, 2*o.ackWait)
	fmt.Fprintln(w, "| round | faults | actions | results | missing | duplicated | dup calls id/key | outcome_unknown (explained) | out of order | other failures | settle after last fault | target met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rounds {
		other := len(r.otherFailed) + r.replayErrors + r.eventErrors + r.unexpected + len(r.problems)
		fmt.Fprintf(w, "| %d | %d | %d | %d | %d | %d | %d/%d | %d (%d) | %d | %d | %.1fs%s | %s |\n",
			r.round, len(r.faults), r.actions, r.results, r.missing, r.duplicated, r.dupCallsID, r.dupCallsKey,
			r.outcomeUnknown, r.explained, r.outOfOrder, other, r.settleAfterFault.Seconds(),
			map[bool]string{true: " (timed out)", false: ""}[r.settleTimedOut], map[bool]string{true: "yes", false: "**no**"}[r.ok()])
	}
	fmt.Fprintln(w)
	for _, r := range rounds {
		var mix []string
		for k, n := range r.kinds {
			mix = append(mix, fmt.Sprintf("%s=%d", kindNames[k], n))
		}
		fmt.Fprintf(w, "- round %d actions: %s; runs: %d with the run's result (%d followed by a replica that took them over), %d outcome_unknown\n",
			r.round, strings.Join(mix, " "), r.runsReal, r.runsReattached, r.runsUnknown)
		fmt.Fprintf(w, "- round %d faults: %s\n", r.round, faultSummary(r.faults))
		for _, f := range r.faults {
			leads := ""
			if len(f.leads) > 0 {
				leads = " leading " + strings.Join(f.leads, "+")
			}
			fmt.Fprintf(w, "  - %s–%s %s %s%s%s\n", f.at.Format("15:04:05.0"), f.end.Format("15:04:05.0"), f.kind, f.target, leads, f.note)
		}
		if len(r.causes) > 0 {
			fmt.Fprintf(w, "  - outcome_unknown by cause:\n")
			var cs []string
			for c := range r.causes {
				cs = append(cs, c)
			}
			sort.Strings(cs)
			for _, c := range cs {
				fmt.Fprintf(w, "    - %d × %s\n", r.causes[c], c)
			}
		}
		if other := mapString(r.otherFailed); other != "none" || r.replayErrors+r.eventErrors+r.unexpected > 0 {
			fmt.Fprintf(w, "  - other: failures %s, replay errors %d, event count errors %d, unexpected outputs %d\n", other, r.replayErrors, r.eventErrors, r.unexpected)
		}
		for _, p := range r.problems {
			fmt.Fprintf(w, "  - problem: %s\n", p)
		}
	}
}
