package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// refNameAnnotation names an image in an OCI layout's index.json, so that
// `skopeo copy oci:DIR:TAG` and `oras cp --from-oci-layout DIR:TAG` find
// it by the release's tag.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// imageMeta is what every image of a release says of itself: the
// release's version, revision, source and time.
type imageMeta = releaseInfo

// platformImage is one architecture's image of a multi-arch image.
type platformImage struct {
	Binary binary
	Digest v1.Hash
}

// builtImage is a multi-arch image written as an OCI layout.
type builtImage struct {
	Name string
	// Dir is the layout's directory relative to the release directory.
	Dir       string
	Digest    v1.Hash
	Platforms []platformImage
}

// labels are the image's OCI labels (config) and annotations (manifests
// and index): the same keys as the Dockerfile's images.
func (m imageMeta) labels(c command) map[string]string {
	return map[string]string{
		"org.opencontainers.image.created":     m.Created.Format(time.RFC3339),
		"org.opencontainers.image.description": c.Description,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.revision":    m.Revision,
		"org.opencontainers.image.source":      m.Source,
		"org.opencontainers.image.title":       c.Image,
		"org.opencontainers.image.version":     m.Version,
	}
}

// platformOf is the OCI platform of a Linux architecture; arm64 carries
// the variant v8, as registries' and runtimes' indexes do.
func platformOf(arch string) v1.Platform {
	p := v1.Platform{OS: "linux", Architecture: arch}
	if arch == "arm64" {
		p.Variant = "v8"
	}
	return p
}

// buildPlatformImage assembles one architecture's image: the shared base
// layer (users, CA bundle, /tmp) and a layer with the static binary, run
// as the non-root user with the binary as entrypoint.
func buildPlatformImage(m imageMeta, b binary, releaseDir string, base v1.Layer) (v1.Image, error) {
	entry, err := binaryEntry(b.Command.Name, filepath.Join(releaseDir, filepath.FromSlash(b.Path)))
	if err != nil {
		return nil, err
	}
	app, err := newLayer([]tarEntry{entry}, m.Created)
	if err != nil {
		return nil, err
	}
	p := platformOf(b.Arch)
	cfg := &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      v1.Time{Time: m.Created},
		Config: v1.Config{
			Entrypoint: []string{"/" + b.Command.Name},
			User:       imageUser,
			WorkingDir: "/",
			Labels:     m.labels(b.Command),
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, fmt.Errorf("setting the config of %s: %w", b.Command.Image, err)
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: m.Created}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "fenceline release: users, CA certificates, /tmp"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created, CreatedBy: "fenceline release: /" + b.Command.Name}})
	if err != nil {
		return nil, fmt.Errorf("adding the layers of %s: %w", b.Command.Image, err)
	}
	annotated, ok := mutate.Annotations(img, m.labels(b.Command)).(v1.Image)
	if !ok {
		return nil, fmt.Errorf("annotating the image of %s: not an image", b.Command.Image)
	}
	return annotated, nil
}

// buildImage assembles the multi-arch image of a command from its binaries
// (one per architecture) and writes it as an OCI image layout in
// <releaseDir>/images/<image>.
func buildImage(m imageMeta, bins []binary, releaseDir string, base v1.Layer) (builtImage, error) {
	c := bins[0].Command
	out := builtImage{Name: c.Image, Dir: filepath.ToSlash(filepath.Join("images", c.Image))}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range bins {
		img, err := buildPlatformImage(m, b, releaseDir, base)
		if err != nil {
			return builtImage{}, err
		}
		digest, err := img.Digest()
		if err != nil {
			return builtImage{}, fmt.Errorf("digest of %s for %s: %w", c.Image, b.Arch, err)
		}
		p := platformOf(b.Arch)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
		out.Platforms = append(out.Platforms, platformImage{Binary: b, Digest: digest})
	}
	annotated, ok := mutate.Annotations(idx, m.labels(c)).(v1.ImageIndex)
	if !ok {
		return builtImage{}, fmt.Errorf("annotating the index of %s: not an index", c.Image)
	}
	idx = annotated
	digest, err := idx.Digest()
	if err != nil {
		return builtImage{}, fmt.Errorf("digest of the %s index: %w", c.Image, err)
	}
	out.Digest = digest
	path, err := layout.Write(filepath.Join(releaseDir, filepath.FromSlash(out.Dir)), empty.Index)
	if err != nil {
		return builtImage{}, fmt.Errorf("creating the OCI layout of %s: %w", c.Image, err)
	}
	if err := path.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameAnnotation: m.Version})); err != nil {
		return builtImage{}, fmt.Errorf("writing the OCI layout of %s: %w", c.Image, err)
	}
	return out, readableByAll(string(path))
}

// readableByAll gives every file of a layout mode 0644 (directories
// 0755): the layout writer leaves layer blobs private to the user who
// built them (temporary files renamed into place), and whoever pushes or
// serves the release may be another user.
func readableByAll(dir string) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		return fmt.Errorf("setting the modes of %s: %w", dir, err)
	}
	return nil
}
