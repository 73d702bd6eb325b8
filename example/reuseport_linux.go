//go:build linux && !(mips || mipsle || mips64 || mips64le || sparc64)

package main

import (
	"context"
	"net"
	"syscall"
)

// sharedPorts reports whether several worker processes can listen on one
// port on this system.
const sharedPorts = true

// soReusePort is SO_REUSEPORT on Linux: the syscall package lacks the
// name, and its value is 15 on every architecture this file is built for.
const soReusePort = 0xf

// listenShared listens on addr with SO_REUSEPORT set, so that every worker
// process binds the same port and the kernel spreads new connections among
// them.
func listenShared(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	return lc.Listen(ctx, "tcp", addr)
}

// workerAttr makes the kernel send SIGTERM to a worker whose parent dies,
// so that workers never outlive their supervisor.
func workerAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
