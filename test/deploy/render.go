package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Kustomize runs `kubectl kustomize dir` with the given kubectl and decodes
// the objects it renders. Other test packages (the Helm chart's) compare
// their renderings with deploy/ through it.
func Kustomize(kubectl, dir string) ([]unstructured.Unstructured, error) {
	var out, errOut bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", dir)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %w\n%s", dir, err, errOut.String())
	}
	objs, err := DecodeObjects(out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("decoding kustomize output of %s: %w", dir, err)
	}
	return objs, nil
}

// DecodeObjects splits a multi-document YAML stream into objects, skipping
// empty documents.
func DecodeObjects(data []byte) ([]unstructured.Unstructured, error) {
	var objs []unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := utilyaml.Unmarshal(doc, &m); err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, unstructured.Unstructured{Object: m})
	}
}
