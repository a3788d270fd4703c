// Command image builds the hermes-bridge container image without Docker: it
// cross-compiles the static binary for each platform (or takes a prebuilt one) and,
// with github.com/google/go-containerregistry, writes an OCI image (an index of one
// manifest per platform, one layer each) as a tar archive that `docker load`, `podman
// load` and `skopeo copy oci-archive:` read, and optionally as an OCI layout directory.
//
// It is a module of its own (deploy/image/go.mod), so the registry library's module
// graph (docker/cli, moby, containerd's errdefs, ...) stays out of the service's
// go.mod. It builds the binary in the hermes-bridge module, found in the current
// directory or above it. From the repository root:
//
//	make image                                    # bin/hermes-bridge-oci.tar, linux/amd64 + linux/arm64
//	go -C deploy/image run . -platforms linux/arm64 -o /tmp/hb.tar
//	go -C deploy/image run . -binary "$PWD/hermes-bridge" -platforms linux/amd64
//
// The image has what the final stage of deploy/Dockerfile has (entrypoint, command,
// user, ports, environment, working directory, volume, labels; image_test.go checks
// it). Its only layer holds /hermes-bridge, /etc/passwd and /etc/group with the nonroot
// user (65532), the Mozilla CA roots, /data (the nonroot user's) and /tmp. There is no
// shell. The output is reproducible: every timestamp is SOURCE_DATE_EPOCH, else the
// commit time of HEAD, so two builds of one commit have the same digests.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// mainModule is the module of the binary the image runs, mainPackage its package.
const (
	mainModule  = "github.com/hermes-bridge/hermes-bridge"
	mainPackage = mainModule + "/cmd/hermes-bridge"
)

// ldflagsPrefix starts the -ldflags of the build (the version follows), as in
// deploy/Dockerfile: no symbol table or DWARF (stack traces keep their names and lines).
const ldflagsPrefix = "-s -w -X main.version="

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command's flags.
type options struct {
	out, layout       string
	platforms, binary string
	version, revision string
	epoch             string
	name, tag         string
	// src is the directory of the hermes-bridge module, srcErr why it was not found.
	src    string
	srcErr error
}

// run is the command: it returns 0 when the image was written, 2 on a usage error and
// 1 when the build failed.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	o.src, o.srcErr = moduleRoot()
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "o", filepath.Join(o.src, "bin", "hermes-bridge-oci.tar"), "write the image as an OCI archive (tar) here; empty: none")
	fs.StringVar(&o.layout, "layout", "", "also write the image as an OCI layout into this directory (new or empty)")
	fs.StringVar(&o.platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated platforms (linux/amd64, linux/arm64)")
	fs.StringVar(&o.binary, "binary", "", "use this prebuilt static binary instead of building one (one platform only)")
	fs.StringVar(&o.version, "version", "", "version stamped into the binary (-X main.version) and the labels; with -binary, the labels only (default: git describe --tags --always --dirty, else dev)")
	fs.StringVar(&o.revision, "revision", "", "VCS revision for the label (default: git rev-parse HEAD)")
	fs.StringVar(&o.epoch, "epoch", "", "Unix time of every timestamp in the image (default: $SOURCE_DATE_EPOCH, else the commit time of HEAD, else 0)")
	fs.StringVar(&o.name, "name", "hermes-bridge", "image name it loads as")
	fs.StringVar(&o.tag, "tag", "", "image tag it loads as (default: the version, made a valid tag)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: go -C deploy/image run . [flags]\n\nBuilds the hermes-bridge OCI image without Docker.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "image: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	res, err := build(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "image: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	fmt.Fprintf(stdout, "image %s:%s (%s), %s\n", o.name, res.tag, strings.Join(res.platforms, ", "), res.digest)
	if o.layout != "" {
		fmt.Fprintf(stdout, "OCI layout: %s\n", o.layout)
	}
	if o.out != "" {
		fmt.Fprintf(stdout, "OCI archive: %s (%d bytes)\nload it with one of:\n", o.out, res.archiveSize)
		fmt.Fprintf(stdout, "  docker load -i %s\n  podman load -i %s\n  skopeo copy oci-archive:%s docker-daemon:%s:%s\n",
			o.out, o.out, o.out, o.name, res.tag)
		if len(res.platforms) > 1 {
			fmt.Fprintf(stdout, "(docker load with the classic image store takes %s, the first platform; -platforms, or IMAGE_PLATFORMS for make image, chooses)\n", res.platforms[0])
		}
	}
	return 0
}

// usageError is a bad flag value.
type usageError struct{ error }

// result is what build wrote.
type result struct {
	tag         string
	platforms   []string
	digest      v1.Hash
	archiveSize int64
}

// build resolves the defaults of o, builds the binaries (or checks the given one),
// assembles the image and writes it.
func build(ctx context.Context, o options, log io.Writer) (result, error) {
	if o.out == "" && o.layout == "" {
		return result{}, usageError{errors.New("nothing to write: set -o or -layout")}
	}
	var plats []v1.Platform
	for s := range strings.SplitSeq(o.platforms, ",") {
		p, err := parsePlatform(s)
		if err != nil {
			return result{}, usageError{err}
		}
		if slices.ContainsFunc(plats, p.Equals) {
			return result{}, usageError{fmt.Errorf("platform %s listed twice", p)}
		}
		plats = append(plats, p)
	}
	if o.binary != "" && len(plats) != 1 {
		return result{}, usageError{errors.New("-binary needs exactly one platform in -platforms")}
	}
	if o.version == "" {
		o.version = gitOutput(ctx, o.src, "describe", "--tags", "--always", "--dirty")
		if o.version == "" {
			o.version = "dev"
		}
	}
	if strings.ContainsAny(o.version, " \t\n'\"\\") {
		return result{}, usageError{fmt.Errorf("-version %q: must not hold spaces, quotes or backslashes", o.version)}
	}
	if o.revision == "" {
		o.revision = gitOutput(ctx, o.src, "rev-parse", "HEAD")
	}
	created, err := resolveEpoch(ctx, o.src, o.epoch)
	if err != nil {
		return result{}, usageError{err}
	}
	if !validName.MatchString(o.name) {
		return result{}, usageError{fmt.Errorf("-name %q: not a valid image name (lower case, such as hermes-bridge or registry.example.com/team/hermes-bridge)", o.name)}
	}
	if o.tag == "" {
		o.tag = tagFromVersion(o.version)
	} else if !validTag.MatchString(o.tag) {
		return result{}, usageError{fmt.Errorf("-tag %q: not a valid image tag ([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})", o.tag)}
	}
	if o.layout != "" {
		// Checked before the minutes of a build; writeLayout checks again.
		if entries, err := os.ReadDir(o.layout); err == nil && len(entries) > 0 {
			return result{}, usageError{fmt.Errorf("-layout %s: the directory is not empty", o.layout)}
		}
	}
	ca, err := caBundle()
	if err != nil {
		return result{}, err
	}
	spec := imageSpec{Platforms: plats, Version: o.version, Revision: o.revision, Created: created, Name: o.name, Tag: o.tag, CACerts: ca}
	if o.binary != "" {
		spec.Binaries = []string{o.binary}
	} else {
		if o.srcErr != nil {
			return result{}, o.srcErr
		}
		tmp, err := os.MkdirTemp("", "hermes-bridge-image-")
		if err != nil {
			return result{}, fmt.Errorf("temporary directory: %w", err)
		}
		defer os.RemoveAll(tmp)
		for _, p := range plats {
			fmt.Fprintf(log, "building %s for %s (version %s)\n", mainPackage, p, o.version)
			out := filepath.Join(tmp, "hermes-bridge-"+p.Architecture)
			if err := buildBinary(ctx, o.src, p, o.version, out); err != nil {
				return result{}, err
			}
			spec.Binaries = append(spec.Binaries, out)
		}
	}
	img, err := buildImage(spec)
	if err != nil {
		return result{}, err
	}
	res := result{tag: o.tag}
	if res.digest, err = img.digest(); err != nil {
		return result{}, fmt.Errorf("build image: %w", err)
	}
	for _, p := range plats {
		res.platforms = append(res.platforms, p.String())
	}
	dir := o.layout
	if dir == "" {
		tmp, err := os.MkdirTemp("", "hermes-bridge-layout-")
		if err != nil {
			return result{}, fmt.Errorf("temporary directory: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if err := img.writeLayout(dir); err != nil {
		return result{}, err
	}
	if o.out != "" {
		if res.archiveSize, err = writeArchiveFile(dir, o.out, created); err != nil {
			return result{}, err
		}
	}
	return res, nil
}

// writeArchiveFile writes the layout in dir as an archive to path through a temporary
// file in its directory, so a failed build leaves no half-written archive, and returns
// its size.
func writeArchiveFile(dir, path string, mtime time.Time) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return 0, fmt.Errorf("write OCI archive: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".hermes-bridge-oci-*.tar")
	if err != nil {
		return 0, fmt.Errorf("write OCI archive: %w", err)
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	if err := writeArchive(f, dir, mtime); err != nil {
		f.Close()
		return 0, err
	}
	st, err := f.Stat()
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return 0, fmt.Errorf("write OCI archive %s: %w", path, err)
	}
	return st.Size(), nil
}

// moduleRoot returns the directory of the hermes-bridge module: the current directory
// or the nearest one above it whose go.mod is that module's.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if m := moduleLine.FindSubmatch(gomod); err == nil && m != nil && string(m[1]) == mainModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s in the current directory or above it: run in the repository, or give -binary", mainModule)
		}
		dir = parent
	}
}

var moduleLine = regexp.MustCompile(`(?m)^module\s+"?([^\s"]+)`)

// buildBinary builds the static hermes-bridge binary for p into out, with the flags
// of deploy/Dockerfile: CGO_ENABLED=0, -trimpath, -buildvcs=false, -ldflags "-s -w -X
// main.version=...". Without VCS stamping the binary depends on the source and the
// toolchain only (the revision is in the image's label), so the same commit built
// here or by the Dockerfile with the same Go release gives the same binary. GOFLAGS
// from the environment or go env is replaced, so it cannot change the image. It runs
// the go command on PATH in dir, the hermes-bridge module (with its go.mod's
// dependencies); out must be absolute or relative to dir.
func buildBinary(ctx context.Context, dir string, p v1.Platform, version, out string) error {
	c := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", ldflagsPrefix+version, "-o", out, mainPackage)
	c.Dir = dir
	c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=-buildvcs=false")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	c.Stdout = &stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", mainPackage, p, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// gitOutput runs git with args in dir and returns its trimmed output, or "" when git
// is missing or fails (not a clone).
func gitOutput(ctx context.Context, dir string, args ...string) string {
	c := exec.CommandContext(ctx, "git", args...)
	c.Dir = dir
	out, err := c.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// resolveEpoch returns the image's timestamp: flag (Unix seconds) if set, else
// $SOURCE_DATE_EPOCH, else the commit time of HEAD in dir, else the Unix epoch.
func resolveEpoch(ctx context.Context, dir, flagValue string) (time.Time, error) {
	s, from := flagValue, "-epoch"
	if s == "" {
		s, from = os.Getenv("SOURCE_DATE_EPOCH"), "SOURCE_DATE_EPOCH"
	}
	if s == "" {
		s, from = gitOutput(ctx, dir, "log", "-1", "--format=%ct"), "git log"
	}
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("%s=%q: want a Unix time in seconds", from, s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// validName is the grammar of an image name: an optional registry host (and port),
// then lower-case path components.
var validName = regexp.MustCompile(`^(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)

// validTag is the grammar of an image tag.
var validTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// tagFromVersion makes a version (git describe output, say) a valid tag: characters
// a tag cannot hold become '_', and it is cut to 128 characters.
func tagFromVersion(v string) string {
	b := []byte(v)
	for i, c := range b {
		ok := c == '_' || c == '.' || c == '-' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
		if !ok || (i == 0 && (c == '.' || c == '-')) {
			b[i] = '_'
		}
	}
	if len(b) > 128 {
		b = b[:128]
	}
	if len(b) == 0 {
		return "dev"
	}
	return string(b)
}
