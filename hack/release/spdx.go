package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// The SPDX 2.3 JSON document, written with encoding/json: the fields the
// release's SBOMs use, named as in the SPDX 2.3 JSON schema.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

// spdxCreationInfo says when and by what the document was made.
type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

// spdxPackage is an SPDX package: a binary, an image, a Go module, a chart.
type spdxPackage struct {
	SPDXID                string            `json:"SPDXID"`
	Name                  string            `json:"name"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	PackageFileName       string            `json:"packageFileName,omitempty"`
	Supplier              string            `json:"supplier,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	Checksums             []spdxChecksum    `json:"checksums,omitempty"`
	SourceInfo            string            `json:"sourceInfo,omitempty"`
	LicenseConcluded      string            `json:"licenseConcluded,omitempty"`
	LicenseDeclared       string            `json:"licenseDeclared,omitempty"`
	CopyrightText         string            `json:"copyrightText,omitempty"`
	Comment               string            `json:"comment,omitempty"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
}

// spdxChecksum is a package checksum; the release uses SHA256 only.
type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

// spdxExternalRef is a package URL (purl) reference.
type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

// spdxRelationship relates two elements of the document.
type spdxRelationship struct {
	SpdxElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSpdxElement string `json:"relatedSpdxElement"`
}

const (
	spdxDocumentID = "SPDXRef-DOCUMENT"
	noAssertion    = "NOASSERTION"
	supplier       = "Organization: The Fenceline Authors"
	spdxNamespace  = "https://fenceline.io/spdx/"
)

// sbom builds one SPDX document; package IDs are unique within it, and a
// Go module linked into several binaries is one package.
type sbom struct {
	doc     spdxDocument
	ids     map[string]bool
	modules map[string]string
}

// newSBOM starts a document. The namespace must be unique per document:
// callers derive it from the artifact's digest, so that it also stays the
// same when the same artifact is described again.
func newSBOM(name, uniquePart string, r releaseInfo) *sbom {
	return &sbom{
		doc: spdxDocument{
			SPDXVersion:       "SPDX-2.3",
			DataLicense:       "CC0-1.0",
			SPDXID:            spdxDocumentID,
			Name:              name,
			DocumentNamespace: spdxNamespace + r.Version + "/" + name + "-" + uniquePart,
			CreationInfo: spdxCreationInfo{
				Created:  r.Created.UTC().Format(time.RFC3339),
				Creators: []string{"Tool: fenceline-release-" + r.Version, supplier},
			},
			Packages:      []spdxPackage{},
			Relationships: []spdxRelationship{},
		},
		ids:     map[string]bool{},
		modules: map[string]string{},
	}
}

// add adds a package with an ID made from hint, and returns the ID.
func (s *sbom) add(p spdxPackage, hint string) string {
	base := "SPDXRef-" + spdxIDChars(hint)
	id := base
	for n := 2; s.ids[id]; n++ {
		id = fmt.Sprintf("%s-%d", base, n)
	}
	s.ids[id] = true
	p.SPDXID = id
	if p.DownloadLocation == "" {
		p.DownloadLocation = noAssertion
	}
	s.doc.Packages = append(s.doc.Packages, p)
	return id
}

// relate records that from stands in relation typ to to.
func (s *sbom) relate(from, typ, to string) {
	s.doc.Relationships = append(s.doc.Relationships, spdxRelationship{SpdxElementID: from, RelationshipType: typ, RelatedSpdxElement: to})
}

// write writes the document as indented JSON.
func (s *sbom) write(path string) error {
	data, err := json.MarshalIndent(s.doc, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the SBOM %s: %w", s.doc.Name, err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the SBOM %s: %w", s.doc.Name, err)
	}
	return nil
}

// spdxIDChars keeps the characters an SPDX ID may hold (letters, digits,
// "." and "-") and turns every other one into "-".
func spdxIDChars(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

// sha256Checksum is the SPDX checksum of a hex SHA-256 digest.
func sha256Checksum(hexDigest string) []spdxChecksum {
	return []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: hexDigest}}
}

// purlRef is the external reference of a package URL.
func purlRef(purl string) []spdxExternalRef {
	return []spdxExternalRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: purl}}
}

// purlEscape percent-encodes every character of s but the unreserved ones
// (a purl's version and qualifier values are percent-encoded; "+" of a
// Go version such as +incompatible must be).
func purlEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(".-_~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// goPURL is the package URL of a Go module version.
func goPURL(path, version string) string {
	segments := strings.Split(path, "/")
	for i, seg := range segments {
		segments[i] = purlEscape(seg)
	}
	purl := "pkg:golang/" + strings.Join(segments, "/")
	if version != "" {
		purl += "@" + purlEscape(version)
	}
	return purl
}

// ociPURL is the package URL of an image: by digest when it is known, with
// its tag and, for an image of a registry, the repository's URL.
func ociPURL(repository, digestHex, tag string, qualifiers ...string) string {
	name, repoURL := repository, ""
	if i := strings.LastIndexByte(repository, '/'); i >= 0 {
		name, repoURL = repository[i+1:], repository
	}
	purl := "pkg:oci/" + purlEscape(strings.ToLower(name))
	if digestHex != "" {
		purl += "@" + purlEscape("sha256:"+digestHex)
	}
	q := append([]string(nil), qualifiers...)
	if repoURL != "" {
		q = append(q, "repository_url="+purlEscape(repoURL))
	}
	if tag != "" {
		q = append(q, "tag="+purlEscape(tag))
	}
	if len(q) > 0 {
		// The purl specification orders qualifiers by key.
		sort.Strings(q)
		purl += "?" + strings.Join(q, "&")
	}
	return purl
}

// h1ToSHA256 turns a go.sum hash ("h1:" and the base64 of a SHA-256 over
// the module's file list) into hex, the form of an SPDX SHA256 checksum;
// "" when sum is not such a hash.
func h1ToSHA256(sum string) string {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sum, "h1:"))
	if !strings.HasPrefix(sum, "h1:") || err != nil || len(raw) != 32 {
		return ""
	}
	return hex.EncodeToString(raw)
}
