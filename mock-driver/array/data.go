package array

// Write decides a data-plane write to the volume from node. The
// mock keeps no data: the audit log records each accepted or refused write,
// which is what tests assert on.
func (a *Array) Write(node, volID string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, err := volume(a.state, volID)
	if err != nil {
		return err
	}
	return checkWrite(v, node)
}
