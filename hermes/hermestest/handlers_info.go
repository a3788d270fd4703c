package hermestest

import (
	"net/http"
	"os"
	"time"
)

func (s *Server) handleHealth(c *call) {
	b := obj{{"status", "ok"}, {"platform", "hermes-agent"}}
	if s.cfg.version != Version016 {
		b = append(b, kv{"version", s.cfg.version})
	}
	writeJSON(c.w, http.StatusOK, nil, b)
}

func isoTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000") + "+00:00"
}

func (s *Server) handleHealthDetailed(c *call) {
	now := s.now()
	platforms := obj{{"api_server", obj{{"state", "connected"}, {"error_code", nil}, {"error_message", nil}, {"updated_at", isoTime(now)}}}}
	active := s.InFlight()
	if s.cfg.version == Version016 {
		writeJSON(c.w, http.StatusOK, nil, obj{
			{"status", "ok"}, {"platform", "hermes-agent"}, {"gateway_state", "running"}, {"platforms", platforms},
			{"active_agents", active}, {"exit_reason", nil}, {"updated_at", isoTime(now)}, {"pid", os.Getpid()},
		})
		return
	}
	checks := obj{
		{"state_db", obj{{"status", "ok"}}},
		{"config", obj{{"status", "ok"}}},
		{"model", obj{{"status", "ok"}}},
		{"disk", obj{{"status", "ok"}, {"used_percent", pyFloat(6.9)}, {"free_bytes", int64(79134085120)}}},
		{"gateway", obj{{"status", "ok"}, {"state", "running"}, {"connected_platforms", 1}, {"platforms", 1}}},
		{"background_queues", obj{{"status", "ok"}, {"active_api_runs", active}, {"process_completions", 0}, {"active_delegations", 0}}},
	}
	writeJSON(c.w, http.StatusOK, nil, obj{
		{"status", "ok"}, {"readiness", obj{{"status", "ok"}, {"checks", checks}}},
		{"platform", "hermes-agent"}, {"version", s.cfg.version}, {"gateway_state", "running"}, {"platforms", platforms},
		{"active_agents", active}, {"gateway_busy", active > 0}, {"gateway_drainable", true},
		{"exit_reason", nil}, {"updated_at", isoTime(now)}, {"pid", os.Getpid()},
	})
}

func (s *Server) handleModels(c *call) {
	writeJSON(c.w, http.StatusOK, nil, obj{{"object", "list"}, {"data", []any{obj{
		{"id", serverModel}, {"object", "model"}, {"created", s.now().Unix()}, {"owned_by", "hermes"},
		{"permission", []any{}}, {"root", serverModel}, {"parent", nil},
	}}}})
}

func ep(method, path string) obj { return obj{{"method", method}, {"path", path}} }

func (s *Server) handleCapabilities(c *call) {
	v21 := s.v021()
	idem := obj{{"supported", true}, {"durable", !s.cfg.idemMemory}, {"retention_seconds", int(RunsIdempotencyRetention / time.Second)}}
	features := obj{
		{"chat_completions", true}, {"chat_completions_streaming", true}, {"responses_api", true}, {"responses_streaming", true},
		{"run_submission", true}}
	if v21 { // right after run_submission, as the 0.21 builder has it
		features = append(features, kv{"runs_idempotency", idem})
	}
	features = append(features, obj{
		{"run_status", true}, {"run_events_sse", true}, {"run_stop", true}, {"run_approval_response", true}}...)
	if v21 {
		features = append(features, kv{"run_steer", true})
	}
	features = append(features, obj{
		{"tool_progress_events", true}, {"approval_events", true}, {"session_resources", true}, {"session_chat", true},
		{"session_chat_streaming", true}, {"session_fork", true}, {"admin_config_rw", false}, {"jobs_admin", false},
		{"memory_write_api", false}, {"skills_api", true}, {"audio_api", false}, {"realtime_voice", false},
		{"session_continuity_header", "X-Hermes-Session-Id"}, {"session_key_header", "X-Hermes-Session-Key"},
		{"cors", false},
	}...)
	if s.cfg.runsIdem && !v21 { // WithRunsIdempotency on an older version
		features = append(features, kv{"runs_idempotency", idem})
	}
	endpoints := obj{
		{"health", ep("GET", "/health")}, {"health_detailed", ep("GET", "/health/detailed")},
		{"models", ep("GET", "/v1/models")}, {"chat_completions", ep("POST", "/v1/chat/completions")},
		{"responses", ep("POST", "/v1/responses")}, {"runs", ep("POST", "/v1/runs")},
		{"run_status", ep("GET", "/v1/runs/{run_id}")}, {"run_events", ep("GET", "/v1/runs/{run_id}/events")},
		{"run_approval", ep("POST", "/v1/runs/{run_id}/approval")}}
	if v21 {
		endpoints = append(endpoints, kv{"run_steer", ep("POST", "/v1/runs/{run_id}/steer")})
	}
	endpoints = append(endpoints, obj{{"run_stop", ep("POST", "/v1/runs/{run_id}/stop")},
		{"skills", ep("GET", "/v1/skills")}, {"toolsets", ep("GET", "/v1/toolsets")},
		{"sessions", ep("GET", "/api/sessions")}, {"session_create", ep("POST", "/api/sessions")},
		{"session", ep("GET", "/api/sessions/{session_id}")}, {"session_update", ep("PATCH", "/api/sessions/{session_id}")},
		{"session_delete", ep("DELETE", "/api/sessions/{session_id}")}, {"session_messages", ep("GET", "/api/sessions/{session_id}/messages")},
		{"session_fork", ep("POST", "/api/sessions/{session_id}/fork")}, {"session_chat", ep("POST", "/api/sessions/{session_id}/chat")},
		{"session_chat_stream", ep("POST", "/api/sessions/{session_id}/chat/stream")},
	}...)
	writeJSON(c.w, http.StatusOK, nil, obj{
		{"object", "hermes.api_server.capabilities"}, {"platform", "hermes-agent"}, {"model", serverModel},
		{"auth", obj{{"type", "bearer"}, {"required", true}}},
		{"runtime", obj{{"mode", "server_agent"}, {"tool_execution", "server"}, {"split_runtime", false},
			{"description", "The API server creates a server-side Hermes AIAgent; tools execute on the API-server host unless a future explicit split-runtime mode is enabled."}}},
		{"features", features}, {"endpoints", endpoints},
	})
}

func (s *Server) handleSkills(c *call) {
	writeJSON(c.w, http.StatusOK, nil, obj{{"object", "list"}, {"data", []any{
		obj{{"name", "github-pr-workflow"}, {"description", "Open, review and merge GitHub pull requests."}, {"category", "github"}},
		obj{{"name", "plan"}, {"description", "Write a step-by-step plan before acting."}, {"category", nil}},
	}}})
}

func (s *Server) handleToolsets(c *call) {
	writeJSON(c.w, http.StatusOK, nil, obj{{"object", "list"}, {"platform", "api_server"}, {"data", []any{
		obj{{"name", "web"}, {"label", "Web Search"}, {"description", "Search the web and extract pages."}, {"enabled", true}, {"configured", true}, {"tools", []string{"web_extract", "web_search"}}},
		obj{{"name", "terminal"}, {"label", "Terminal"}, {"description", "Run shell commands on the server host."}, {"enabled", true}, {"configured", true}, {"tools", []string{"process", "terminal"}}},
	}}})
}
