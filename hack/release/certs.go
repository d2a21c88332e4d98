package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"runtime/debug"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// caBundleModule is the Go module the images' CA certificates come from:
// Mozilla's NSS roots as the Go project publishes them, at the version
// hack/release/go.mod pins, so that a release does not depend on the
// trust store of the machine that builds it.
const caBundleModule = "golang.org/x/crypto/x509roots/fallback"

// caBundlePath is where the images carry the bundle: the path Go's
// crypto/x509 (and most TLS stacks) read on Linux.
const caBundlePath = "etc/ssl/certs/ca-certificates.crt"

// caBundle is the PEM bundle written into the images, with what the SBOM
// says of it.
type caBundle struct {
	PEM     []byte
	SHA256  string
	Roots   int
	Skipped int
	Module  debug.Module
}

// newCABundle encodes the NSS roots as PEM. Roots with a constraint that
// X.509 cannot express (a distrust-after date) are left out: a PEM bundle
// would trust them without the constraint.
func newCABundle() (caBundle, error) {
	var buf bytes.Buffer
	var b caBundle
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			b.Skipped++
			continue
		}
		cert, err := x509.ParseCertificate(root.Certificate)
		if err != nil {
			return caBundle{}, fmt.Errorf("parsing a root of %s: %w", caBundleModule, err)
		}
		fmt.Fprintf(&buf, "# %s\n", cert.Subject)
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return caBundle{}, fmt.Errorf("encoding a root: %w", err)
		}
		b.Roots++
	}
	if b.Roots == 0 {
		return caBundle{}, fmt.Errorf("%s holds no unconstrained roots", caBundleModule)
	}
	b.PEM = buf.Bytes()
	sum := sha256.Sum256(b.PEM)
	b.SHA256 = hex.EncodeToString(sum[:])
	b.Module = ownDependency(caBundleModule)
	return b, nil
}

// ownDependency returns this program's requirement on module path from its
// build info, with only the path when the build recorded none.
func ownDependency(path string) debug.Module {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == path {
				return *d
			}
		}
	}
	return debug.Module{Path: path}
}
