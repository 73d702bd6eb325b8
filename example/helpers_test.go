package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"sync"
)

// syncBuffer is a bytes.Buffer safe for one writer and many readers at
// once: the log of a process or of a logger under test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// logPids returns the pid attribute of every slog text line in log whose
// message starts with msg, in order, without repeats.
func logPids(log, msg string) []int {
	re := regexp.MustCompile(fmt.Sprintf(`msg="?%s[^=]*pid=(\d+)`, regexp.QuoteMeta(msg)))
	var pids []int
	seen := map[int]bool{}
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		pid, _ := strconv.Atoi(m[1]) // the pattern matched digits only
		if !seen[pid] {
			seen[pid] = true
			pids = append(pids, pid)
		}
	}
	return pids
}
