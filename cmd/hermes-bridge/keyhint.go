package main

import "fmt"

// keySource names where s's key comes from, for logs: "file:<path>", "env:<variable>"
// or "none". Never the key.
func (s EndpointSpec) keySource() string {
	switch {
	case s.APIKeyFile != "":
		return "file:" + s.APIKeyFile
	case s.APIKeyEnv != "":
		return "env:" + s.APIKeyEnv
	case s.apiKey != "":
		return "env:HERMES_API_KEY"
	}
	return "none"
}

// keyHint is what an authentication failure of endpoint s adds to its message (see
// bridge.Endpoint.KeyHint): the settings that give the endpoint its key. It goes into
// results, which every reader of the output stream sees, so it names settings, never a
// file path or a key. fromFile says whether s comes from HERMES_ENDPOINTS_FILE.
func (s EndpointSpec) keyHint(fromFile bool) string {
	if fromFile {
		switch {
		case s.APIKeyFile != "":
			return fmt.Sprintf("the key of endpoint %q is read from its api_key_file in HERMES_ENDPOINTS_FILE (re-read on SIGHUP): check that it holds the Hermes API server's key", s.ID)
		case s.APIKeyEnv != "":
			return fmt.Sprintf("the key of endpoint %q is read from %s (its api_key_env in HERMES_ENDPOINTS_FILE): check that it holds the Hermes API server's key", s.ID, s.APIKeyEnv)
		}
		return fmt.Sprintf("endpoint %q has no key: set its api_key_file or api_key_env in HERMES_ENDPOINTS_FILE", s.ID)
	}
	switch {
	case s.APIKeyFile != "":
		return "the key is read from HERMES_API_KEY_FILE (re-read on SIGHUP): check that the file holds the Hermes API server's key"
	case s.apiKey != "":
		return "the key comes from HERMES_API_KEY: check that it is the Hermes API server's key (HERMES_API_KEY_FILE is preferred)"
	}
	return "set HERMES_API_KEY_FILE to a file holding the Hermes API server's key (or HERMES_API_KEY to the key); fake-hermes prints the line to export"
}
