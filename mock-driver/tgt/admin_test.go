package tgt

import (
	"errors"
	"strings"
	"testing"
)

func TestLookToolSaysWhatToInstall(t *testing.T) {
	_, err := lookTool("tgtd-that-does-not-exist")
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "install Debian's tgt package") {
		t.Fatalf("lookTool = %v, want ErrNotInstalled saying what to install", err)
	}
}
