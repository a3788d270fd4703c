package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/elf"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// passwd and group are distroless's: root, nonroot (uid 65532) and nobody, none with a
// login shell (there is none in the image).
var (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:" + strconv.Itoa(uid) + ":" + strconv.Itoa(gid) + ":nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"nonroot:x:" + strconv.Itoa(gid) + ":\n"
)

// rootfsLayer returns the image's one layer, an uncompressed tar: the binary at
// /hermes-bridge (0755, owned by root so the bridge cannot rewrite it), /etc/passwd and
// /etc/group, the CA bundle, the nonroot user's home, /data (owned by the nonroot user)
// and /tmp (1777). Every entry has the time mtime; parents come before their children.
func rootfsLayer(bin, caCerts []byte, mtime time.Time) ([]byte, error) {
	type entry struct {
		name     string // a directory's ends in '/'
		mode     int64
		uid, gid int
		data     []byte
	}
	entries := []entry{
		{name: "data/", mode: 0o755, uid: uid, gid: gid},
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: caCerts},
		{name: "hermes-bridge", mode: 0o755, data: bin},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: uid, gid: gid},
		{name: "tmp/", mode: 0o1777},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: e.name, Size: int64(len(e.data)), Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: mtime, Format: tar.FormatUSTAR}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// caBundle returns the PEM bundle of the Mozilla (NSS) root certificates that
// golang.org/x/crypto/x509roots/fallback carries, at the version go.mod pins: the same
// bytes on every build machine. Roots that NSS constrains (distrusted after a date)
// are left out, since a PEM file cannot carry the constraint.
func caBundle() ([]byte, error) {
	var buf bytes.Buffer
	n := 0
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		if _, err := x509.ParseCertificate(r.Certificate); err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("CA bundle: no root certificates")
	}
	return buf.Bytes(), nil
}

// elfMachine is the ELF machine of each supported GOARCH.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkStaticELF reports an error unless bin is a Linux ELF executable for goarch with
// no program interpreter and no shared library dependency: a binary that runs in an
// image with nothing else in it.
func checkStaticELF(bin []byte, goarch string) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	if want, ok := elfMachine[goarch]; !ok || f.Machine != want {
		return fmt.Errorf("ELF machine %s, want one for %s", f.Machine, goarch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (it has a program interpreter): build with CGO_ENABLED=0")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("read its dynamic section: %w", err)
	}
	if len(libs) > 0 {
		return fmt.Errorf("needs shared libraries %v: build with CGO_ENABLED=0", libs)
	}
	if f.Type != elf.ET_EXEC {
		return fmt.Errorf("ELF type %s, want a static executable (ET_EXEC)", f.Type)
	}
	return nil
}
