package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Media types of the OCI image spec (v1.1) that the image uses.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Annotations on the descriptor in the layout's index.json: the tag (OCI) and the full
// name (containerd, and so Docker's containerd image store, read it on load).
const (
	annotationRefName       = "org.opencontainers.image.ref.name"
	annotationContainerName = "io.containerd.image.name"
)

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platformSpec     `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// platformSpec is the platform of a manifest in an index.
type platformSpec struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

// index is an OCI image index (also the layout's index.json).
type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// manifest is an OCI image manifest.
type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

// imageConfig is the OCI image configuration (the "config" blob).
type imageConfig struct {
	Created      string         `json:"created"`
	Architecture string         `json:"architecture"`
	OS           string         `json:"os"`
	Variant      string         `json:"variant,omitempty"`
	Config       runtimeConfig  `json:"config"`
	RootFS       rootFS         `json:"rootfs"`
	History      []historyEntry `json:"history"`
}

// runtimeConfig is the part of the image configuration a runtime applies.
type runtimeConfig struct {
	User         string              `json:"User"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	Env          []string            `json:"Env"`
	Entrypoint   []string            `json:"Entrypoint"`
	Cmd          []string            `json:"Cmd"`
	Volumes      map[string]struct{} `json:"Volumes"`
	WorkingDir   string              `json:"WorkingDir"`
	Labels       map[string]string   `json:"Labels"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type historyEntry struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

// dockerManifestEntry is one entry of the manifest.json that `docker save` writes and
// Docker's classic image store reads on `docker load`.
type dockerManifestEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// platform is one target of the image.
type platform struct {
	OS, Arch, Variant string
}

func (p platform) String() string {
	s := p.OS + "/" + p.Arch
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// parsePlatform parses os/arch or os/arch/variant; only linux/amd64 and linux/arm64 are
// supported (the bridge is pure Go; other targets are untested). arm64 gets variant v8,
// as registries list it.
func parsePlatform(s string) (platform, error) {
	parts := strings.Split(strings.TrimSpace(s), "/")
	if len(parts) < 2 || len(parts) > 3 {
		return platform{}, fmt.Errorf("platform %q: want os/arch, such as linux/amd64", s)
	}
	p := platform{OS: parts[0], Arch: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	switch {
	case p.OS != "linux":
		return platform{}, fmt.Errorf("platform %q: only linux is supported", s)
	case p.Arch == "amd64" && p.Variant == "":
	case p.Arch == "arm64" && (p.Variant == "" || p.Variant == "v8"):
		p.Variant = "v8"
	default:
		return platform{}, fmt.Errorf("platform %q: only linux/amd64 and linux/arm64 are supported", s)
	}
	return p, nil
}

// imageSpec is what one build puts in the image.
type imageSpec struct {
	// Binaries holds, for each platform in order, the path of a static hermes-bridge
	// binary for it.
	Platforms []platform
	Binaries  []string
	// Version and Revision go into the labels.
	Version, Revision string
	// Created is every timestamp of the image: file times, config and history.
	Created time.Time
	// Name and Tag name the image on load (name:tag).
	Name, Tag string
	// CACerts is the PEM bundle written to caFile.
	CACerts []byte
}

// blob is one content-addressed file of the layout.
type blob struct {
	digest string // sha256:<hex>
	data   []byte
}

// image is a built image: its blobs and the layout's top-level files.
type image struct {
	blobs          []blob // in the order written, no duplicates
	indexJSON      []byte // the layout's index.json
	dockerManifest []byte // manifest.json, naming the first platform's image
	// top is the descriptor in index.json: the image index when there are several
	// platforms, else the one manifest.
	top descriptor
	// manifests holds each platform's manifest descriptor, in the order of the spec.
	manifests []descriptor
}

// addBlob stores data once and returns its descriptor.
func (img *image) addBlob(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	d := "sha256:" + hex.EncodeToString(sum[:])
	if !slices.ContainsFunc(img.blobs, func(b blob) bool { return b.digest == d }) {
		img.blobs = append(img.blobs, blob{digest: d, data: data})
	}
	return descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}
}

// buildImage assembles the image for spec. It reads each binary, checks that it is a
// static ELF executable for its platform, and is deterministic: the same spec and
// binaries give the same bytes, so the same digests.
func buildImage(spec imageSpec) (*image, error) {
	if len(spec.Platforms) == 0 || len(spec.Platforms) != len(spec.Binaries) {
		return nil, fmt.Errorf("build image: %d platforms and %d binaries", len(spec.Platforms), len(spec.Binaries))
	}
	if spec.Name == "" || spec.Tag == "" {
		return nil, fmt.Errorf("build image: name and tag are required")
	}
	created := spec.Created.UTC().Truncate(time.Second)
	createdText := created.Format(time.RFC3339)
	img := &image{}
	var docker []dockerManifestEntry
	for i, p := range spec.Platforms {
		bin, err := os.ReadFile(spec.Binaries[i])
		if err != nil {
			return nil, fmt.Errorf("build image for %s: %w", p, err)
		}
		if err := checkStaticELF(bin, p.Arch); err != nil {
			return nil, fmt.Errorf("build image for %s: %s: %w", p, spec.Binaries[i], err)
		}
		layerTar, err := rootfsLayer(bin, spec.CACerts, created)
		if err != nil {
			return nil, fmt.Errorf("build image for %s: layer: %w", p, err)
		}
		diffID := sha256.Sum256(layerTar)
		gz, err := gzipBytes(layerTar)
		if err != nil {
			return nil, fmt.Errorf("build image for %s: compress the layer: %w", p, err)
		}
		layer := img.addBlob(mediaTypeLayer, gz)
		cfg := imageConfig{
			Created:      createdText,
			Architecture: p.Arch,
			OS:           p.OS,
			Variant:      p.Variant,
			Config: runtimeConfig{
				User:         user,
				ExposedPorts: map[string]struct{}{opsPort + "/tcp": {}},
				Env:          slices.Clone(imageEnv),
				Entrypoint:   slices.Clone(entrypoint),
				Cmd:          slices.Clone(cmd),
				Volumes:      map[string]struct{}{dataDir: {}},
				WorkingDir:   dataDir,
				Labels:       labels(spec.Version, spec.Revision),
			},
			RootFS: rootFS{Type: "layers", DiffIDs: []string{"sha256:" + hex.EncodeToString(diffID[:])}},
			History: []historyEntry{{
				Created:   createdText,
				CreatedBy: "go run ./deploy/image (hermes-bridge " + spec.Version + ")",
			}},
		}
		cfgJSON, err := json.Marshal(cfg)
		if err != nil {
			return nil, fmt.Errorf("build image for %s: config: %w", p, err)
		}
		cfgDesc := img.addBlob(mediaTypeConfig, cfgJSON)
		m := manifest{SchemaVersion: 2, MediaType: mediaTypeManifest, Config: cfgDesc, Layers: []descriptor{layer}}
		mJSON, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("build image for %s: manifest: %w", p, err)
		}
		md := img.addBlob(mediaTypeManifest, mJSON)
		md.Platform = &platformSpec{Architecture: p.Arch, OS: p.OS, Variant: p.Variant}
		img.manifests = append(img.manifests, md)
		if i == 0 {
			docker = append(docker, dockerManifestEntry{
				Config:   blobPath(cfgDesc.Digest),
				RepoTags: []string{spec.Name + ":" + spec.Tag},
				Layers:   []string{blobPath(layer.Digest)},
			})
		}
	}
	img.top = img.manifests[0]
	if len(img.manifests) > 1 {
		idx, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: img.manifests})
		if err != nil {
			return nil, fmt.Errorf("build image: index: %w", err)
		}
		img.top = img.addBlob(mediaTypeIndex, idx)
	}
	img.top.Annotations = map[string]string{
		annotationRefName:       spec.Tag,
		annotationContainerName: containerdName(spec.Name) + ":" + spec.Tag,
	}
	var err error
	if img.indexJSON, err = json.MarshalIndent(index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []descriptor{img.top}}, "", "  "); err != nil {
		return nil, fmt.Errorf("build image: index.json: %w", err)
	}
	if img.dockerManifest, err = json.Marshal(docker); err != nil {
		return nil, fmt.Errorf("build image: manifest.json: %w", err)
	}
	return img, nil
}

// containerdName is name as Docker normalizes it: a name without a registry is
// docker.io/library/<name> (so "hermes-bridge" loads as hermes-bridge:<tag>).
func containerdName(name string) string {
	first, _, found := strings.Cut(name, "/")
	switch {
	case !found:
		return "docker.io/library/" + name
	case strings.ContainsAny(first, ".:") || first == "localhost":
		return name
	default:
		return "docker.io/" + name
	}
}

// blobPath is the layout path of a blob.
func blobPath(digest string) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}

const ociLayoutFile = `{"imageLayoutVersion":"1.0.0"}`

// layoutFiles lists the files of the OCI image layout, in the order they are written:
// oci-layout, the blobs, index.json, and manifest.json for `docker load`.
func (img *image) layoutFiles() []blob {
	files := []blob{{digest: "oci-layout", data: []byte(ociLayoutFile)}}
	for _, b := range img.blobs {
		files = append(files, blob{digest: blobPath(b.digest), data: b.data})
	}
	return append(files,
		blob{digest: "index.json", data: img.indexJSON},
		blob{digest: "manifest.json", data: img.dockerManifest})
}

// writeLayout writes the image as an OCI image layout into dir, which must not exist
// or be empty.
func (img *image) writeLayout(dir string) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("write OCI layout: %s is not empty", dir)
	}
	for _, f := range img.layoutFiles() {
		p := filepath.Join(dir, filepath.FromSlash(f.digest))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("write OCI layout: %w", err)
		}
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			return fmt.Errorf("write OCI layout: %w", err)
		}
	}
	return nil
}

// writeArchive writes the image layout as a tar archive (an "oci-archive", which also
// carries manifest.json for Docker's classic store). Every entry has the time mtime and
// owner 0, so the archive is as deterministic as the image.
func (img *image) writeArchive(w io.Writer, mtime time.Time) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	for _, f := range img.layoutFiles() {
		for d := range parentDirs(f.digest) {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatUSTAR}); err != nil {
				return fmt.Errorf("write OCI archive: %w", err)
			}
		}
		if err := writeFile(tw, f.digest, f.data, 0o644, 0, 0, mtime); err != nil {
			return fmt.Errorf("write OCI archive: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write OCI archive: %w", err)
	}
	return nil
}

// parentDirs yields the directories above a slash-separated path, outermost first.
func parentDirs(p string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for i := 0; i < len(p); i++ {
			if p[i] == '/' && !yield(p[:i]) {
				return
			}
		}
	}
}

func writeFile(tw *tar.Writer, name string, data []byte, mode int64, uid, gid int, mtime time.Time) error {
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(data)), Mode: mode, Uid: uid, Gid: gid, ModTime: mtime, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// gzipBytes compresses data with no name and no time in the header (deterministic for
// one Go version).
func gzipBytes(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
