//go:build !unix

package natsembed

import (
	"errors"
	"os"
)

var errLocked = errors.New("locked")

// tryLock takes no lock where flock does not exist: the store directory is not
// protected against a second server on these platforms.
func tryLock(*os.File) error { return nil }
