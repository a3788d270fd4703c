package main

import (
	"errors"
	"math"
	"math/big"
	"strings"

	"github.com/hermes-bridge/hermes-bridge/bridge"
)

// byteSize is a size setting in bytes; 0 is unlimited. It reads a number of bytes with
// an optional unit, decimal (B, KB, MB, GB, TB) or binary (KiB, MiB, GiB, TiB), case
// insensitive, and "unlimited" or -1.
type byteSize int64

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

var errSize = errors.New("not a size")

// UnmarshalText implements encoding.TextUnmarshaler (caarlos0/env uses it).
func (b *byteSize) UnmarshalText(text []byte) error {
	s := strings.ToLower(strings.TrimSpace(string(text)))
	if s == "unlimited" || s == "-1" {
		*b = 0
		return nil
	}
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(s)
	}
	num, unit := s[:i], strings.TrimSpace(s[i:])
	mult, ok := sizeUnits[unit]
	if !ok || num == "" || strings.Count(num, ".") > 1 {
		return errSize
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return errSize
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() || r.Sign() <= 0 || !r.Num().IsInt64() || r.Num().Int64() > math.MaxInt64/2 {
		return errSize // a fraction of a byte, nothing, or more than a stream can hold
	}
	*b = byteSize(r.Num().Int64())
	return nil
}

// String writes the size as the variables take it ("10GiB", "unlimited").
func (b byteSize) String() string { return bridge.FormatSize(int64(b)) }
