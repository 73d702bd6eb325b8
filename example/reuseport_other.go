//go:build !linux || mips || mipsle || mips64 || mips64le || sparc64

package main

import (
	"context"
	"errors"
	"net"
	"syscall"
)

// sharedPorts reports whether several worker processes can listen on one
// port on this system.
const sharedPorts = false

// listenShared fails: parseFlags refuses -workers above 1 on this system.
func listenShared(context.Context, string) (net.Listener, error) {
	return nil, errors.New("SO_REUSEPORT is not supported here")
}

// workerAttr sets nothing on this system.
func workerAttr() *syscall.SysProcAttr { return nil }
