package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Environment variables that point the harness at its binaries. The Makefile
// exports both; outside make they default to paths below the repository root.
const (
	// ToolsDirEnv names the directory holding etcd, kube-apiserver,
	// kube-controller-manager, kube-scheduler, kubectl and kwok.
	ToolsDirEnv = "FENCELINE_TOOLS_DIR"
	// BinDirEnv names the directory holding this repository's own binaries
	// (fenceline-attacher, fenceline-controller, mock-driver).
	BinDirEnv = "FENCELINE_BIN_DIR"
)

// RepoRoot returns the repository root: the first directory at or above the
// working directory that holds a go.mod declaring this module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding repository root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module fenceline.io/fenceline\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding repository root: no go.mod of module fenceline.io/fenceline above the working directory")
		}
		dir = parent
	}
}

// ToolsDir returns $FENCELINE_TOOLS_DIR, or <repo>/.cache/tools/bin.
func ToolsDir() (string, error) {
	return dirFromEnv(ToolsDirEnv, ".cache", "tools", "bin")
}

// BinDir returns $FENCELINE_BIN_DIR, or <repo>/bin.
func BinDir() (string, error) {
	return dirFromEnv(BinDirEnv, "bin")
}

func dirFromEnv(env string, rel ...string) (string, error) {
	if d := os.Getenv(env); d != "" {
		return filepath.Abs(d)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{root}, rel...)...), nil
}

// Tool returns the path of a control-plane binary, or an error telling the
// user how to build it.
func Tool(name string) (string, error) {
	dir, err := ToolsDir()
	if err != nil {
		return "", err
	}
	return executable(dir, name, "run `make tools` to build the local control plane")
}

// Binary returns the path of one of this repository's binaries, or an error
// telling the user how to build it.
func Binary(name string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	return executable(dir, name, "run `make build`")
}

func executable(dir, name, hint string) (string, error) {
	p := filepath.Join(dir, name)
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%s not found in %s (%s): %w", name, dir, hint, err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file (%s)", p, hint)
	}
	return p, nil
}
