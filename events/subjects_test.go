package events_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hermes-bridge/hermes-bridge/events"
)

func TestSubjects(t *testing.T) {
	var s events.Subjects
	checks := map[string]string{
		s.Action("primary", "chat"): "hermes.actions.primary.chat",
		s.Actions():                 "hermes.actions.>",
		s.Events("a-1"):             "hermes.events.a-1",
		s.Results("a-1"):            "hermes.results.a-1",
		s.Cancel("a-1"):             "hermes.cancel.a-1",
		s.Approvals("a-1"):          "hermes.approvals.a-1",
		s.DLQ():                     "hermes.dlq",
		events.Subjects{Prefix: "acme.h"}.Events("x"): "acme.h.events.x",
	}
	for got, want := range checks {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if got := s.Output("a-1"); !slices.Equal(got, []string{"hermes.events.a-1", "hermes.results.a-1"}) {
		t.Errorf("Output = %v", got)
	}
	if got := events.CapabilityID("primary", "chat_stream"); got != "cap:hermes_agent:primary:chat_stream" {
		t.Errorf("CapabilityID = %q", got)
	}
}

func TestParseAction(t *testing.T) {
	tests := []struct {
		prefix, subject, ep, op string
		ok                      bool
	}{
		{"", "hermes.actions.primary.chat", "primary", "chat", true},
		{"", "hermes.actions.ep_1-a.session_chat_stream", "ep_1-a", "session_chat_stream", true},
		{"acme.h", "acme.h.actions.p.health", "p", "health", true},
		{"", "hermes.actions.Primary.chat", "", "", false},
		{"", "hermes.actions.primary", "", "", false},
		{"", "hermes.actions.primary.chat.extra", "", "", false},
		{"", "hermes.actions..chat", "", "", false},
		{"", "hermes.events.primary.chat", "", "", false},
		{"", "other.actions.primary.chat", "", "", false},
		{"", "hermes.actions.primary.Chat", "", "", false},
		{"", "hermes.actions.p." + strings.Repeat("o", 64), "p", strings.Repeat("o", 64), true},
		{"", "hermes.actions.p." + strings.Repeat("o", 65), "", "", false},
		{"", "hermes.actions.p.chat-x", "", "", false},
	}
	for _, tt := range tests {
		ep, op, err := events.Subjects{Prefix: tt.prefix}.ParseAction(tt.subject)
		if tt.ok != (err == nil) || ep != tt.ep || op != tt.op {
			t.Errorf("ParseAction(%q) = %q, %q, %v", tt.subject, ep, op, err)
		}
		if err != nil && !errors.Is(err, events.ErrInvalidSubject) {
			t.Errorf("error %v does not wrap ErrInvalidSubject", err)
		}
	}
	var s events.Subjects
	if id, err := s.ParseCancel("hermes.cancel.a-1"); err != nil || id != "a-1" {
		t.Errorf("ParseCancel = %q, %v", id, err)
	}
	if id, err := s.ParseApprovals("hermes.approvals.a_1"); err != nil || id != "a_1" {
		t.Errorf("ParseApprovals = %q, %v", id, err)
	}
	if _, err := s.ParseCancel("hermes.cancel.a.b"); err == nil {
		t.Error("ParseCancel accepted a two-token id")
	}
	ep, op, ok := events.ParseCapabilityID("cap:hermes_agent:primary:chat")
	if !ok || ep != "primary" || op != "chat" {
		t.Errorf("ParseCapabilityID = %q, %q, %v", ep, op, ok)
	}
	if _, _, ok := events.ParseCapabilityID("cap:hermes_agent:Primary:chat"); ok {
		t.Error("ParseCapabilityID accepted an upper-case endpoint")
	}
}

func TestValidIDs(t *testing.T) {
	for id, want := range map[string]bool{
		"a": true, "A-z_09": true, strings.Repeat("x", 128): true, strings.Repeat("x", 129): false,
		"": false, "a.b": false, "a b": false, "a*": false, "a>": false, "é": false,
	} {
		if got := events.ValidActionID(id); got != want {
			t.Errorf("ValidActionID(%q) = %v", id, got)
		}
	}
	for id, want := range map[string]bool{
		"primary": true, "ep-1_x": true, "Primary": false, "": false, strings.Repeat("x", 129): false, "a.b": false,
	} {
		if got := events.ValidEndpointID(id); got != want {
			t.Errorf("ValidEndpointID(%q) = %v", id, got)
		}
	}
	for range 100 {
		id := events.NewActionID()
		if len(id) != 26 || !events.ValidActionID(id) || strings.ContainsAny(id, "-_") {
			t.Fatalf("NewActionID = %q", id)
		}
	}
}
