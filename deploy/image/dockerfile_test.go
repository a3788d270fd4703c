package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// dockerfileStage is one stage of a Dockerfile: its FROM line and its instructions.
type dockerfileStage struct {
	from  string
	instr []dockerInstruction
}

type dockerInstruction struct {
	cmd  string // upper case: USER, ENV, ...
	args string
	line int
}

// parseDockerfile splits a Dockerfile into stages. It handles what deploy/Dockerfile
// uses: comment lines (also inside a continued instruction, which Docker drops) and
// lines continued with a trailing backslash. Parser directives are comments to it.
func parseDockerfile(src string) ([]dockerfileStage, error) {
	var stages []dockerfileStage
	var cur strings.Builder
	start := 0
	flush := func() error {
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			return nil
		}
		cmd, args, _ := strings.Cut(text, " ")
		in := dockerInstruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			stages = append(stages, dockerfileStage{from: in.args})
			return nil
		}
		if len(stages) == 0 {
			if in.cmd == "ARG" {
				return nil // a global ARG before the first FROM
			}
			return fmt.Errorf("line %d: %s before the first FROM", in.line, in.cmd)
		}
		stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, in)
		return nil
	}
	continued := false
	for i, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && continued) {
			continue
		}
		if !continued {
			start = i + 1
		}
		body, cont := strings.CutSuffix(strings.TrimRight(line, " \t"), `\`)
		cur.WriteString(body)
		cur.WriteString(" ")
		continued = cont
		if !cont {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if continued {
		return nil, fmt.Errorf("the last instruction ends with a line continuation")
	}
	return stages, flush()
}

// finalStageConfig is what the final stage of a Dockerfile sets in the image config.
type finalStageConfig struct {
	from       string
	user       string
	expose     []string // port/proto
	entrypoint []string
	cmd        []string
	env        map[string]string
	labels     map[string]string
	workdir    string
	volumes    []string
}

// readFinalStage parses path and returns what its last stage sets. ENTRYPOINT and CMD
// must be in exec (JSON) form: the shell form needs /bin/sh, which the image lacks.
func readFinalStage(path string) (*finalStageConfig, []dockerfileStage, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	stages, err := parseDockerfile(string(src))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(stages) == 0 {
		return nil, nil, fmt.Errorf("%s: no FROM", path)
	}
	last := stages[len(stages)-1]
	c := &finalStageConfig{from: last.from, env: map[string]string{}, labels: map[string]string{}}
	for _, in := range last.instr {
		where := fmt.Sprintf("%s:%d: %s", path, in.line, in.cmd)
		switch in.cmd {
		case "USER":
			c.user = in.args
		case "WORKDIR":
			c.workdir = in.args
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				c.expose = append(c.expose, p)
			}
		case "ENTRYPOINT", "CMD":
			var v []string
			if err := json.Unmarshal([]byte(in.args), &v); err != nil {
				return nil, nil, fmt.Errorf("%s must be in exec form (a JSON array; there is no shell): %w", where, err)
			}
			if in.cmd == "ENTRYPOINT" {
				c.entrypoint = v
			} else {
				c.cmd = v
			}
		case "VOLUME":
			var v []string
			if err := json.Unmarshal([]byte(in.args), &v); err != nil {
				v = strings.Fields(in.args)
			}
			c.volumes = append(c.volumes, v...)
		case "ENV", "LABEL":
			m := c.env
			if in.cmd == "LABEL" {
				m = c.labels
			}
			if err := parseKeyValues(in.args, m); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", where, err)
			}
		}
	}
	return c, stages, nil
}

// parseKeyValues parses the key=value form of ENV and LABEL (words split on blanks,
// double quotes group, a backslash escapes the next character) into m.
func parseKeyValues(s string, m map[string]string) error {
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		case c == '"':
			quoted = !quoted
			inWord = true
		case (c == ' ' || c == '\t') && !quoted:
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	for _, word := range words {
		k, v, ok := strings.Cut(word, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q is not key=value (the legacy 'ENV key value' form is not supported)", word)
		}
		m[k] = v
	}
	return nil
}

func TestParseDockerfile(t *testing.T) {
	src := "# syntax=docker/dockerfile:1\nARG X=1\nFROM a AS b\nRUN x \\\n  # dropped\n  y\nFROM c\nENV A=1 \\\n    B=\"two words\" C=\\\"q\nLABEL k=\"${V}\"\nCMD [\"run\"]\n"
	stages, err := parseDockerfile(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 || stages[0].from != "a AS b" || stages[1].from != "c" {
		t.Fatalf("stages = %+v", stages)
	}
	if got := stages[0].instr[0]; got.cmd != "RUN" || strings.Join(strings.Fields(got.args), " ") != "x y" || got.line != 4 {
		t.Errorf("RUN = %+v", got)
	}
	env := map[string]string{}
	if err := parseKeyValues(stages[1].instr[0].args, env); err != nil {
		t.Fatal(err)
	}
	if env["A"] != "1" || env["B"] != "two words" || env["C"] != `"q` || len(env) != 3 {
		t.Errorf("ENV = %q", env)
	}
	for _, bad := range []string{`A="x`, `A 1`, `=1`} {
		if err := parseKeyValues(bad, map[string]string{}); err == nil {
			t.Errorf("parseKeyValues(%q): no error", bad)
		}
	}
	if _, err := parseDockerfile("RUN x\n"); err == nil {
		t.Error("RUN before FROM: no error")
	}
	if _, err := parseDockerfile("FROM a\nRUN x \\\n"); err == nil {
		t.Error("dangling continuation: no error")
	}
}
