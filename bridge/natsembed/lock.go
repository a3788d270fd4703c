package natsembed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LockFileName is the file inside the store directory that a running server holds an
// exclusive lock on (see [ErrStoreLocked]). It names the holder: "pid <pid>" and, once the
// server listens, "url <client URL>", one per line.
const LockFileName = "natsembed.lock"

// ErrStoreLocked is matched (errors.Is) by the error of Start and Restart when another
// server holds the store directory; errors.As gives the [*StoreLockedError].
//
// Two servers on one store directory corrupt it: each recovers and writes the same
// stream files. So a server takes an exclusive OS lock (flock) on [LockFileName] in
// the directory before it starts and holds it until Shutdown. The kernel releases the
// lock when the process ends in any way, so a killed process never blocks the next
// start. (On platforms without flock no lock is taken.)
var ErrStoreLocked = errors.New("natsembed: store directory in use by another server")

// StoreLockedError says which store directory is taken and, as far as its lock file
// tells, by whom. It matches both ErrStoreLocked and ErrNotReady.
type StoreLockedError struct {
	Dir      string // the store directory
	LockFile string // the lock file inside it
	PID      int    // the holder's process id; 0 when the lock file does not say
	URL      string // the holder's client URL; "" when the lock file does not say
}

func (e *StoreLockedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "natsembed: store directory %s is in use by another process", e.Dir)
	if e.PID > 0 {
		fmt.Fprintf(&b, " (pid %d", e.PID)
		if e.URL != "" {
			fmt.Fprintf(&b, ", its NATS server listens on %s", e.URL)
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, ", which holds the lock on %s", e.LockFile)
	return b.String()
}

// Is reports whether target is ErrStoreLocked or ErrNotReady.
func (e *StoreLockedError) Is(target error) bool {
	return target == ErrStoreLocked || target == ErrNotReady
}

// dirLock is a held lock on a store directory.
type dirLock struct {
	f *os.File
}

// lockDir creates dir if needed and takes the exclusive lock on its lock file without
// waiting. When another process (or another Server of this one) holds it, the error is a
// *StoreLockedError.
func lockDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: store directory %s: %w", ErrNotReady, dir, err)
	}
	path := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: lock file %s: %w", ErrNotReady, path, err)
	}
	if err := tryLock(f); err != nil {
		_ = f.Close()
		if !errors.Is(err, errLocked) {
			return nil, fmt.Errorf("%w: lock %s: %w", ErrNotReady, path, err)
		}
		content, _ := os.ReadFile(path)
		le := &StoreLockedError{Dir: dir, LockFile: path}
		le.PID, le.URL = parseLockFile(content)
		return nil, le
	}
	l := &dirLock{f: f}
	l.describe("")
	return l, nil
}

// describe writes the holder's pid and, when known, its client URL into the lock file
// (best effort: the lock, not the content, is what excludes other servers).
func (l *dirLock) describe(url string) {
	content := fmt.Sprintf("pid %d\n", os.Getpid())
	if url != "" {
		content += "url " + url + "\n"
	}
	if _, err := l.f.WriteAt([]byte(content), 0); err == nil {
		_ = l.f.Truncate(int64(len(content)))
	}
}

// release gives the lock up: closing the only descriptor of the file releases it.
// The file stays; its content is stale until the next holder rewrites it.
func (l *dirLock) release() {
	_ = l.f.Close()
}

// parseLockFile reads what describe wrote.
func parseLockFile(b []byte) (pid int, url string) {
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch k {
		case "pid":
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				pid = n
			}
		case "url":
			url = v
		}
	}
	return pid, url
}
