package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations on the descriptor in the layout's index.json: the tag (OCI) and the full
// name (containerd, and so Docker's containerd image store, read it on load).
const (
	annotationRefName       = "org.opencontainers.image.ref.name"
	annotationContainerName = "io.containerd.image.name"
)

// parsePlatform parses os/arch or os/arch/variant; only linux/amd64 and linux/arm64 are
// supported (the bridge is pure Go; other targets are untested). arm64 gets variant v8,
// as registries list it.
func parsePlatform(s string) (v1.Platform, error) {
	parts := strings.Split(strings.TrimSpace(s), "/")
	if len(parts) < 2 || len(parts) > 3 {
		return v1.Platform{}, fmt.Errorf("platform %q: want os/arch, such as linux/amd64", s)
	}
	p := v1.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	switch {
	case p.OS != "linux":
		return v1.Platform{}, fmt.Errorf("platform %q: only linux is supported", s)
	case p.Architecture == "amd64" && p.Variant == "":
	case p.Architecture == "arm64" && (p.Variant == "" || p.Variant == "v8"):
		p.Variant = "v8"
	default:
		return v1.Platform{}, fmt.Errorf("platform %q: only linux/amd64 and linux/arm64 are supported", s)
	}
	return p, nil
}

// imageSpec is what one build puts in the image.
type imageSpec struct {
	// Binaries holds, for each platform in order, the path of a static hermes-bridge
	// binary for it.
	Platforms []v1.Platform
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

// image is a built image: one per platform, and their index when there are several.
type image struct {
	spec   imageSpec
	images []v1.Image
	index  v1.ImageIndex // nil with one platform
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
	spec.Created = spec.Created.UTC().Truncate(time.Second)
	created := v1.Time{Time: spec.Created}
	img := &image{spec: spec}
	var adds []mutate.IndexAddendum
	for i, p := range spec.Platforms {
		bin, err := os.ReadFile(spec.Binaries[i])
		if err != nil {
			return nil, fmt.Errorf("build image for %s: %w", p, err)
		}
		if err := checkStaticELF(bin, p.Architecture); err != nil {
			return nil, fmt.Errorf("build image for %s: %s: %w", p, spec.Binaries[i], err)
		}
		layerTar, err := rootfsLayer(bin, spec.CACerts, spec.Created)
		if err != nil {
			return nil, fmt.Errorf("build image for %s: layer: %w", p, err)
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
			tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
		if err != nil {
			return nil, fmt.Errorf("build image for %s: layer: %w", p, err)
		}
		base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
		im, err := mutate.ConfigFile(base, &v1.ConfigFile{
			Created:      created,
			Architecture: p.Architecture,
			OS:           p.OS,
			Variant:      p.Variant,
			Config: v1.Config{
				User:         user,
				ExposedPorts: map[string]struct{}{opsPort + "/tcp": {}},
				Env:          slices.Clone(imageEnv),
				Entrypoint:   slices.Clone(entrypoint),
				Cmd:          slices.Clone(cmd),
				Volumes:      map[string]struct{}{dataDir: {}},
				WorkingDir:   dataDir,
				Labels:       labels(spec.Version, spec.Revision),
			},
			RootFS: v1.RootFS{Type: "layers"},
		})
		if err == nil {
			im, err = mutate.Append(im, mutate.Addendum{Layer: layer, History: v1.History{
				Created:   created,
				CreatedBy: "make image (hermes-bridge " + spec.Version + ")",
			}})
		}
		if err != nil {
			return nil, fmt.Errorf("build image for %s: %w", p, err)
		}
		img.images = append(img.images, im)
		adds = append(adds, mutate.IndexAddendum{Add: im, Descriptor: v1.Descriptor{Platform: &p}})
	}
	if len(adds) > 1 {
		img.index = mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	}
	return img, nil
}

// digest is the digest of what index.json names: the image index when there are
// several platforms, else the one manifest.
func (img *image) digest() (v1.Hash, error) {
	if img.index != nil {
		return img.index.Digest()
	}
	return img.images[0].Digest()
}

// writeLayout writes the image as an OCI image layout into dir, which must not exist
// or be empty: oci-layout, the blobs, index.json naming the image (its tag and full
// name in annotations), and manifest.json, which names the first platform's image for
// Docker's classic image store (`docker load`).
func (img *image) writeLayout(dir string) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("write OCI layout: %s is not empty", dir)
	}
	spec := img.spec
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	opts := []layout.Option{layout.WithAnnotations(map[string]string{
		annotationRefName:       spec.Tag,
		annotationContainerName: containerdName(spec.Name) + ":" + spec.Tag,
	})}
	if img.index != nil {
		err = p.AppendIndex(img.index, opts...)
	} else {
		err = p.AppendImage(img.images[0], append(opts, layout.WithPlatform(spec.Platforms[0]))...)
	}
	if err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	first := img.images[0]
	m, err := first.Manifest()
	if err != nil {
		return fmt.Errorf("write OCI layout: %w", err)
	}
	entry := tarball.Descriptor{Config: blobPath(m.Config.Digest), RepoTags: []string{spec.Name + ":" + spec.Tag}}
	for _, l := range m.Layers {
		entry.Layers = append(entry.Layers, blobPath(l.Digest))
	}
	dm, err := json.Marshal(tarball.Manifest{entry})
	if err == nil {
		err = p.WriteFile("manifest.json", dm, 0o644)
	}
	if err != nil {
		return fmt.Errorf("write OCI layout: manifest.json: %w", err)
	}
	return nil
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
func blobPath(h v1.Hash) string {
	return "blobs/" + h.Algorithm + "/" + h.Hex
}

// writeArchive writes the OCI layout in dir as a tar archive (an "oci-archive", which
// also carries manifest.json for Docker's classic store). The entries come in lexical
// order, and every one has the time mtime, owner 0 and mode 0755 (directories) or 0644,
// so the archive is as deterministic as the layout's files.
func writeArchive(w io.Writer, dir string, mtime time.Time) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Format: tar.FormatUSTAR}
		if d.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return fmt.Errorf("write OCI archive: %w", err)
	}
	return nil
}
