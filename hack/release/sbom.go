package main

import (
	"fmt"
	"runtime/debug"
	"strings"
	"time"
)

// releaseInfo is what every SBOM of a release states.
type releaseInfo struct {
	Version  string
	Revision string
	Source   string
	Created  time.Time
}

// binarySBOM describes a Go binary from its embedded build info: the
// binary, the main module, every module linked into it with its version
// and go.sum checksum, and the standard library.
func binarySBOM(r releaseInfo, b binary) *sbom {
	s := newSBOM(binaryName(b.Command.Name, b.Arch)+"-"+r.Version, b.SHA256, r)
	s.relate(spdxDocumentID, "DESCRIBES", s.addBinary(r, b, b.Path))
	return s
}

// addBinary adds a binary, named by fileName, and the modules it links.
func (s *sbom) addBinary(r releaseInfo, b binary, fileName string) string {
	id := s.add(spdxPackage{
		Name:                  b.Command.Name,
		VersionInfo:           r.Version,
		PackageFileName:       fileName,
		Supplier:              supplier,
		Checksums:             sha256Checksum(b.SHA256),
		SourceInfo:            sourceInfo(r, b.revision()),
		LicenseDeclared:       "Apache-2.0",
		PrimaryPackagePurpose: "APPLICATION",
		Comment: fmt.Sprintf("Static Go binary for linux/%s, built with %s from %s (CGO_ENABLED=0, -trimpath).",
			b.Arch, b.Info.GoVersion, b.Command.Package),
	}, "Application-"+binaryName(b.Command.Name, b.Arch))
	s.relate(id, "CONTAINS", s.addMainModule(r, b))
	for _, m := range b.Info.Deps {
		s.relate(id, "CONTAINS", s.addModule(m))
	}
	s.relate(id, "CONTAINS", s.addStdlib(b.Info.GoVersion))
	return id
}

// sourceInfo says where a package was built from.
func sourceInfo(r releaseInfo, revision string) string {
	return fmt.Sprintf("built from revision %s of %s", revision, r.Source)
}

// addMainModule adds the main module, at the release version: the build
// info's own version of it is a pseudo-version unless the commit was
// tagged and clean, and is kept in the comment.
func (s *sbom) addMainModule(r releaseInfo, b binary) string {
	m := b.Info.Main
	key := m.Path + "@" + r.Version
	if id, ok := s.modules[key]; ok {
		return id
	}
	id := s.add(spdxPackage{
		Name:                  m.Path,
		VersionInfo:           r.Version,
		Supplier:              supplier,
		SourceInfo:            sourceInfo(r, b.revision()),
		LicenseDeclared:       "Apache-2.0",
		PrimaryPackagePurpose: "SOURCE",
		Comment:               fmt.Sprintf("The main module; the Go toolchain recorded its version as %q.", m.Version),
		ExternalRefs:          purlRef(goPURL(m.Path, r.Version)),
	}, "GoModule-"+m.Path)
	s.modules[key] = id
	return id
}

// addModule adds a dependency module once per document. A replaced module
// is described by its replacement: the code actually linked.
func (s *sbom) addModule(m *debug.Module) string {
	version, sum, comment := m.Version, m.Sum, ""
	if r := m.Replace; r != nil {
		version, sum = r.Version, r.Sum
		comment = "Replaced by " + r.Path
		if r.Version != "" {
			comment += "@" + r.Version
		} else {
			comment += ", a directory of the same source tree"
		}
		comment += "."
	}
	key := m.Path + "@" + version + "@" + sum
	if id, ok := s.modules[key]; ok {
		return id
	}
	p := spdxPackage{Name: m.Path, VersionInfo: version, PrimaryPackagePurpose: "LIBRARY", Comment: comment}
	if version == "" {
		p.VersionInfo = noAssertion
		p.ExternalRefs = purlRef(goPURL(m.Path, ""))
	} else {
		p.ExternalRefs = purlRef(goPURL(m.Path, version))
	}
	if hexSum := h1ToSHA256(sum); hexSum != "" {
		p.Checksums = sha256Checksum(hexSum)
		p.Comment = strings.TrimSpace(p.Comment + " go.sum: " + sum + " (the checksum is this hash in hex).")
	}
	id := s.add(p, "GoModule-"+m.Path+"-"+version)
	s.modules[key] = id
	return id
}

// addStdlib adds the Go standard library of the toolchain that built the
// binaries, as vulnerability scanners expect to find it.
func (s *sbom) addStdlib(goVersion string) string {
	key := "stdlib@" + goVersion
	if id, ok := s.modules[key]; ok {
		return id
	}
	id := s.add(spdxPackage{
		Name:                  "stdlib",
		VersionInfo:           goVersion,
		DownloadLocation:      "https://go.dev/dl/",
		LicenseDeclared:       "BSD-3-Clause",
		PrimaryPackagePurpose: "LIBRARY",
		Comment:               "The Go standard library, linked into the binary.",
		ExternalRefs:          purlRef(goPURL("stdlib", strings.TrimPrefix(goVersion, "go"))),
	}, "GoStdlib-"+goVersion)
	s.modules[key] = id
	return id
}

// imageSBOM describes a multi-arch image: the index, each platform's
// image, the binary each one runs (with its modules) and the CA bundle.
func imageSBOM(r releaseInfo, img builtImage, ca caBundle) *sbom {
	digest := img.Digest.Hex
	s := newSBOM(img.Name+"-"+r.Version, digest, r)
	var arches []string
	for _, p := range img.Platforms {
		arches = append(arches, "linux/"+p.Binary.Arch)
	}
	indexID := s.add(spdxPackage{
		Name:                  img.Name,
		VersionInfo:           r.Version,
		PackageFileName:       img.Dir,
		Supplier:              supplier,
		Checksums:             sha256Checksum(digest),
		SourceInfo:            sourceInfo(r, r.Revision),
		LicenseDeclared:       "Apache-2.0",
		PrimaryPackagePurpose: "CONTAINER",
		Comment:               fmt.Sprintf("OCI image index (%s), an OCI image layout in %s; the checksum is the index digest.", strings.Join(arches, ", "), img.Dir),
		ExternalRefs:          purlRef(ociPURL(img.Name, digest, r.Version)),
	}, "Image-"+img.Name)
	s.relate(spdxDocumentID, "DESCRIBES", indexID)
	caID := s.addCABundle(ca)
	for _, p := range img.Platforms {
		platformID := s.add(spdxPackage{
			Name:                  img.Name,
			VersionInfo:           r.Version,
			Supplier:              supplier,
			Checksums:             sha256Checksum(p.Digest.Hex),
			PrimaryPackagePurpose: "CONTAINER",
			Comment:               fmt.Sprintf("The linux/%s image of the index; the checksum is its manifest digest. No shell, user %s.", p.Binary.Arch, imageUser),
			ExternalRefs:          purlRef(ociPURL(img.Name, p.Digest.Hex, r.Version, "arch="+p.Binary.Arch, "os=linux")),
		}, "Image-"+img.Name+"-linux-"+p.Binary.Arch)
		s.relate(indexID, "CONTAINS", platformID)
		s.relate(platformID, "CONTAINS", s.addBinary(r, p.Binary, "/"+p.Binary.Command.Name))
		s.relate(platformID, "CONTAINS", caID)
	}
	return s
}

// addCABundle adds the images' CA certificates, described by the Go module
// they come from and the SHA-256 of the file written.
func (s *sbom) addCABundle(ca caBundle) string {
	comment := fmt.Sprintf("Mozilla NSS root certificates from %s at /%s: %d roots; %d with a distrust-after date left out.",
		ca.Module.Path, caBundlePath, ca.Roots, ca.Skipped)
	if ca.Module.Sum != "" {
		comment += " go.sum: " + ca.Module.Sum + "."
	}
	version := ca.Module.Version
	if version == "" {
		version = noAssertion
	}
	return s.add(spdxPackage{
		Name:                  "ca-certificates",
		VersionInfo:           version,
		PackageFileName:       "/" + caBundlePath,
		Checksums:             sha256Checksum(ca.SHA256),
		LicenseDeclared:       "MPL-2.0",
		PrimaryPackagePurpose: "FILE",
		Comment:               comment,
		ExternalRefs:          purlRef(goPURL(ca.Module.Path, ca.Module.Version)),
	}, "CACertificates")
}

// chartSBOM describes the chart archive: its dependencies and the images
// its values name, by digest for those the release built.
func chartSBOM(r releaseInfo, c packagedChart, images []builtImage) *sbom {
	md := c.Metadata
	s := newSBOM(md.Name+"-chart-"+md.Version, c.SHA256, r)
	chartID := s.add(spdxPackage{
		Name:                  md.Name,
		VersionInfo:           md.Version,
		PackageFileName:       c.Path,
		Supplier:              supplier,
		Checksums:             sha256Checksum(c.SHA256),
		SourceInfo:            sourceInfo(r, r.Revision),
		LicenseDeclared:       "Apache-2.0",
		PrimaryPackagePurpose: "INSTALL",
		Comment:               fmt.Sprintf("Helm chart %s, appVersion %s.", md.Name, md.AppVersion),
	}, "Chart-"+md.Name)
	s.relate(spdxDocumentID, "DESCRIBES", chartID)
	for _, d := range c.Dependencies {
		depID := s.add(spdxPackage{
			Name:                  d.Name,
			VersionInfo:           d.Version,
			DownloadLocation:      d.Repository,
			PrimaryPackagePurpose: "INSTALL",
			Comment:               "A dependency of the chart (Chart.yaml).",
		}, "Chart-"+d.Name)
		s.relate(chartID, "DEPENDS_ON", depID)
	}
	built := map[string]builtImage{}
	for _, img := range images {
		built[img.Name] = img
	}
	for _, ci := range c.Images {
		p := spdxPackage{Name: ci.Repository, VersionInfo: ci.Tag, PrimaryPackagePurpose: "CONTAINER"}
		name := ci.Repository[strings.LastIndexByte(ci.Repository, '/')+1:]
		if img, ok := built[name]; ok {
			p.Checksums = sha256Checksum(img.Digest.Hex)
			p.Comment = fmt.Sprintf("Image named by the chart's values; built by this release (%s), the checksum is its index digest.", img.Dir)
			p.ExternalRefs = purlRef(ociPURL(ci.Repository, img.Digest.Hex, ci.Tag))
		} else {
			p.Comment = "Image named by the chart's values; not built by make release (built from the Dockerfile, see docs/release.md)."
			p.ExternalRefs = purlRef(ociPURL(ci.Repository, "", ci.Tag))
		}
		s.relate(chartID, "DEPENDS_ON", s.add(p, "Image-"+ci.Repository))
	}
	return s
}
