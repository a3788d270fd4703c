package bridge

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/schemas"
)

// codeLiteral finds the error codes the bridge and the Hermes client write into results.
var codeLiteral = regexp.MustCompile(`(?:Code: +|info\.Code, info\.Message = |info\.Code = |Code[A-Za-z]+ += )"([a-z_]+)"`)

// TestErrorCodesAreDocumented: every error code written in the bridge's, its core's or the client's
// source is one of schemas/error-codes.schema.json, so that a new code cannot reach
// results undocumented.
func TestErrorCodesAreDocumented(t *testing.T) {
	raw, err := fs.ReadFile(schemas.FS(), "error-codes.schema.json")
	noErr(t, err)
	var doc struct {
		OneOf []struct {
			Const string `json:"const"`
		} `json:"oneOf"`
	}
	noErr(t, json.Unmarshal(raw, &doc))
	known := map[string]bool{}
	for _, c := range doc.OneOf {
		known[c.Const] = true
	}
	found := 0
	for _, dir := range []string{".", "./core", "../hermes"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		noErr(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			noErr(t, err)
			for _, m := range codeLiteral.FindAllSubmatch(src, -1) {
				found++
				if code := string(m[1]); !known[code] {
					t.Errorf("%s writes error code %q, which schemas/error-codes.schema.json does not list", f, code)
				}
			}
		}
	}
	if found < 20 {
		t.Fatalf("found only %d error code literals: the pattern no longer matches the source", found)
	}
}
