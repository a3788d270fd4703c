package main

import (
	"slices"
	"strings"

	"github.com/rs/zerolog"
)

// unknownVar is a HERMES_* or NATS_* variable that no setting reads, with the setting it
// most likely misspells ("" when none is close).
type unknownVar struct {
	Name, Suggest string
}

// ownPrefixes are the prefixes of the variables the bridge reads: a variable with one of
// them that no setting knows is most likely a misspelling.
var ownPrefixes = []string{"HERMES_", "NATS_"}

// unknownVariables returns, sorted by name, the variables of environ that start with
// an own prefix and that no setting reads. The known names are the env tags of Config,
// the variables of test builds (testBuildVariables) and the api_key_env names of the
// endpoints specs.
func unknownVariables(environ map[string]string, specs []EndpointSpec) []unknownVar {
	known := slices.Clone(testBuildVariables)
	for _, f := range configFields() {
		known = append(known, f.Key)
	}
	for _, s := range specs {
		known = append(known, s.APIKeyEnv)
	}
	var out []unknownVar
	for name := range environ {
		if !slices.ContainsFunc(ownPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) ||
			slices.Contains(known, name) {
			continue
		}
		out = append(out, unknownVar{Name: name, Suggest: closestSetting(name)})
	}
	slices.SortFunc(out, func(a, b unknownVar) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// natscliNames are the variables natscli reads under another name than hermes-bridge.
var natscliNames = map[string]string{"NATS_CERT": "NATS_TLS_CERT", "NATS_KEY": "NATS_TLS_KEY", "NATS_CA": "NATS_TLS_CA"}

// closestSetting returns the setting name that name most likely misspells (or natscli's
// name of, see natscliNames), or "". Names
// are compared whole and without their HERMES_BRIDGE_ or HERMES_ prefix (so that
// HERMES_NATS_PORT finds HERMES_BRIDGE_NATS_PORT), by edit distance with transpositions,
// allowing 1 edit for short names, 2 up to 10 characters and 3 beyond.
func closestSetting(name string) string {
	if s, ok := natscliNames[name]; ok {
		return s
	}
	best, bestD := "", -1
	for _, f := range configFields() {
		d := editDistance(name, f.Key)
		for _, a := range cores(name) {
			for _, b := range cores(f.Key) {
				d = min(d, editDistance(a, b))
			}
		}
		if d <= allowedEdits(len(coreOf(name))) && (bestD < 0 || d < bestD) {
			best, bestD = f.Key, d
		}
	}
	return best
}

// cores returns name without each prefix it starts with.
func cores(name string) []string {
	out := []string{name}
	for _, p := range []string{"HERMES_BRIDGE_", "HERMES_"} {
		if c, ok := strings.CutPrefix(name, p); ok {
			out = append(out, c)
		}
	}
	return out
}

// coreOf is name without its longest own prefix.
func coreOf(name string) string { c := cores(name); return c[len(c)-1] }

func allowedEdits(n int) int {
	switch {
	case n <= 4:
		return 1
	case n <= 10:
		return 2
	}
	return 3
}

// editDistance is the optimal string alignment distance of a and b: insertions,
// deletions, substitutions and transpositions of adjacent bytes.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// message says that the variable is ignored and what it likely misspells; never its
// value (a misspelled HERMES_API_KEY holds a key).
func (u unknownVar) message() string {
	msg := u.Name + " is set but is not a hermes-bridge setting, so it is ignored"
	if u.Suggest != "" {
		msg += "; did you mean " + u.Suggest + "?"
	}
	return msg + " ('hermes-bridge run --help' lists every setting)"
}

// logUnknownVariables logs one warning per unknown variable: its name and the likely
// setting, never its value.
func logUnknownVariables(log zerolog.Logger, unknown []unknownVar) {
	for _, u := range unknown {
		ev := log.Warn().Str("variable", u.Name)
		if u.Suggest != "" {
			ev = ev.Str("did_you_mean", u.Suggest)
		}
		ev.Msg(u.message())
	}
}
