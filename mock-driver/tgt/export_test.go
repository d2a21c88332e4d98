package tgt

// KillDaemon kills the backend's tgtd behind its back, as a crash would.
func KillDaemon(b *Backend) {
	_ = b.cmd.Process.Kill()
	<-b.exited
}
