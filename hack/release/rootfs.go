package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user the images run as: numeric, so that Kubernetes' runAsNonRoot
// check can verify it, and named in /etc/passwd, so that programs that
// look the user up find a home; the same uid/gid as distroless's nonroot.
const (
	nonrootUID  = 65532
	nonrootName = "nonroot"
	nonrootHome = "home/nonroot"
)

// imageUser is the image config's User.
var imageUser = fmt.Sprintf("%d:%d", nonrootUID, nonrootUID)

// tarEntry is one file or directory of a layer.
type tarEntry struct {
	Name     string
	Mode     int64
	UID, GID int
	Dir      bool
	Data     []byte
}

// baseEntries is the base layer every image shares: the user and group
// files, name resolution through files then DNS (what Go assumes without
// an nsswitch.conf, written for other resolvers' sake), the CA bundle, a
// home for the user and a sticky /tmp. No shell and no other programs.
func baseEntries(certs []byte) []tarEntry {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/%s:/sbin/nologin\n",
		nonrootName, nonrootUID, nonrootUID, nonrootName, nonrootHome)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", nonrootName, nonrootUID)
	return []tarEntry{
		{Name: "etc/", Mode: 0o755, Dir: true},
		{Name: "etc/group", Mode: 0o644, Data: []byte(group)},
		{Name: "etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Name: "etc/ssl/", Mode: 0o755, Dir: true},
		{Name: "etc/ssl/certs/", Mode: 0o755, Dir: true},
		{Name: caBundlePath, Mode: 0o644, Data: certs},
		{Name: "home/", Mode: 0o755, Dir: true},
		{Name: nonrootHome + "/", Mode: 0o700, UID: nonrootUID, GID: nonrootUID, Dir: true},
		{Name: "tmp/", Mode: 0o1777, Dir: true},
	}
}

// binaryEntry is the layer entry of an image's program, at the root as in
// the Dockerfile's images.
func binaryEntry(name, path string) (tarEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return tarEntry{}, fmt.Errorf("reading %s for its image: %w", name, err)
	}
	return tarEntry{Name: name, Mode: 0o755, Data: data}, nil
}

// writeTar writes entries as a tar archive with every time set to mtime and
// no user or group names, so that the same inputs give the same layer
// digest.
func writeTar(w io.Writer, entries []tarEntry, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Mode: e.Mode, Uid: e.UID, Gid: e.GID, ModTime: mtime.Truncate(time.Second)}
		if e.Dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("writing the header of %s: %w", e.Name, err)
		}
		if _, err := tw.Write(e.Data); err != nil {
			return fmt.Errorf("writing %s: %w", e.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("closing the layer archive: %w", err)
	}
	return nil
}

// newLayer returns an OCI layer (gzip) of entries.
func newLayer(entries []tarEntry, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	if err := writeTar(&buf, entries, mtime); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("creating a layer: %w", err)
	}
	return layer, nil
}
