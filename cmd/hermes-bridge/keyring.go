package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
)

// keyring holds the API key of every endpoint. Keys from files are cached and re-read
// by Reload (on SIGHUP), so a rotated key file takes effect without a restart; keys
// from the environment are fixed for the life of the process.
//
// Nothing here ever formats a key into an error or a log line.
type keyring struct {
	keys []*keySource
}

// keySource is one endpoint's key.
type keySource struct {
	endpoint string
	file     string                 // "" for a key from the environment or no key
	val      atomic.Pointer[string] // set by newKeyring, never nil after
}

// Key returns the current key ("" for an endpoint without one). It is what
// bridge.Endpoint.Key calls before each request: no I/O, safe for concurrent use.
func (k *keySource) Key() string { return *k.val.Load() }

// newKeyring resolves every endpoint's key source and reads the key files once. An
// unreadable or invalid key file is an error naming the endpoint and the file path.
func newKeyring(specs []EndpointSpec, environ map[string]string) (*keyring, error) {
	r := &keyring{}
	var problems ConfigError
	for _, s := range specs {
		ks := &keySource{endpoint: s.ID, file: s.APIKeyFile}
		v := s.apiKey
		switch {
		case s.APIKeyFile != "":
			var err error
			if v, err = readKeyFile(s.APIKeyFile); err != nil {
				problems.add("endpoint %q: %v", s.ID, err)
				continue
			}
		case s.APIKeyEnv != "":
			v = environ[s.APIKeyEnv]
		}
		ks.val.Store(&v)
		r.keys = append(r.keys, ks)
	}
	if err := problems.err(); err != nil {
		return nil, err
	}
	return r, nil
}

// source returns the key source of endpoint id (nil if unknown).
func (r *keyring) source(id string) *keySource {
	for _, k := range r.keys {
		if k.endpoint == id {
			return k
		}
	}
	return nil
}

// Reload re-reads every key file. A file that cannot be read or holds an invalid key
// keeps its previous key and is reported in the error (by endpoint and path). n is
// the number of keys reloaded.
func (r *keyring) Reload() (n int, err error) {
	var errs []error
	for _, k := range r.keys {
		if k.file == "" {
			continue
		}
		v, err := readKeyFile(k.file)
		if err != nil {
			errs = append(errs, fmt.Errorf("endpoint %q: %w (keeping the previous key)", k.endpoint, err))
			continue
		}
		k.val.Store(&v)
		n++
	}
	return n, errors.Join(errs...)
}

// readKeyFile reads a key file. One trailing line break is tolerated; the key must
// then be 1..16 KiB without whitespace or control characters.
func readKeyFile(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("key file %s: %s", path, fileProblem(err))
	}
	if st.IsDir() {
		return "", fmt.Errorf("key file %s: is a directory", path)
	}
	if st.Size() > maxKeyLen+2 {
		return "", fmt.Errorf("key file %s: is larger than %d bytes", path, maxKeyLen)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("key file %s: %s", path, fileProblem(err))
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if err := checkKey(v); err != nil {
		return "", fmt.Errorf("key file %s: the key %v", path, err)
	}
	return v, nil
}
