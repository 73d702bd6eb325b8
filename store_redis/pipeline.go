package redisstore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Concurrent script calls share pipelines (see WithoutAutoPipelining): a
// call joins a queue, and a sender takes every call queued by then, up to
// maxBatch, and sends them in one pipeline. At most maxSenders pipelines
// are in flight at once; a sender runs while the queue holds calls and
// then ends, so an idle store keeps no goroutine.
const (
	maxSenders = 4
	maxBatch   = 128
	maxQueued  = 1024
)

// autoPipeline sends the scripts of concurrent calls in shared pipelines.
type autoPipeline struct {
	client  redis.UniversalClient
	queue   chan *scriptCall
	senders atomic.Int32 // running
}

// scriptCall is one call waiting in an autoPipeline: its script, keys and
// arguments, and, once done is closed, its reply.
type scriptCall struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	reply  *redis.Cmd
	done   chan struct{}
}

// run runs script on keys as script.Run does, in a pipeline shared with
// concurrent calls unless the store has none.
func (s *Store) run(ctx context.Context, script *redis.Script, keys []string, args []any) *redis.Cmd {
	if s.pipeline == nil {
		return script.Run(ctx, s.client, keys, args...)
	}
	return s.pipeline.run(ctx, script, keys, args)
}

func newAutoPipeline(client redis.UniversalClient) *autoPipeline {
	return &autoPipeline{client: client, queue: make(chan *scriptCall, maxQueued)}
}

// run runs script as script.Run does, in a pipeline it may share with
// other calls. It returns when the reply comes or ctx ends, whichever is
// first; a call whose ctx has ended before its pipeline is sent is not
// sent.
func (p *autoPipeline) run(ctx context.Context, script *redis.Script, keys []string, args []any) *redis.Cmd {
	c := &scriptCall{ctx: ctx, script: script, keys: keys, args: args, done: make(chan struct{})}
	select {
	case p.queue <- c:
	case <-ctx.Done():
		return failedCmd(ctx, ctx.Err())
	}
	p.startSender()
	select {
	case <-c.done:
		return c.reply
	case <-ctx.Done():
		return failedCmd(ctx, ctx.Err())
	}
}

// failedCmd returns a reply that holds err.
func failedCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// startSender starts a sender unless maxSenders are running, and reports
// whether it did.
func (p *autoPipeline) startSender() bool {
	for {
		n := p.senders.Load()
		if n >= maxSenders {
			return false
		}
		if p.senders.CompareAndSwap(n, n+1) {
			go p.send()
			return true
		}
	}
}

// send sends the queued calls, a pipeline at a time, until the queue is
// empty. A call queued just as it found the queue empty, while every
// sender was still counted, is sent by the sender it then starts.
func (p *autoPipeline) send() {
	batch := make([]*scriptCall, 0, maxBatch)
	for {
		batch = p.take(batch[:0])
		if len(batch) == 0 {
			p.senders.Add(-1)
			if len(p.queue) > 0 {
				p.startSender()
			}
			return
		}
		p.exec(batch)
	}
}

// take appends the queued calls to batch, up to maxBatch, without
// waiting. A call whose ctx has ended is answered with its error instead.
func (p *autoPipeline) take(batch []*scriptCall) []*scriptCall {
	for len(batch) < maxBatch {
		select {
		case c := <-p.queue:
			if err := c.ctx.Err(); err != nil {
				c.reply = failedCmd(c.ctx, err)
				close(c.done)
				continue
			}
			batch = append(batch, c)
		default:
			return batch
		}
	}
	return batch
}

// exec sends batch in one pipeline with EVALSHA, and the calls a server
// answered NOSCRIPT in one more with EVAL, then answers every call.
func (p *autoPipeline) exec(batch []*scriptCall) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	p.pipeline(ctx, batch, (*redis.Script).EvalSha)
	var unknown []*scriptCall
	for _, c := range batch {
		if redis.HasErrorPrefix(c.reply.Err(), "NOSCRIPT") {
			unknown = append(unknown, c)
		}
	}
	if len(unknown) > 0 {
		p.pipeline(ctx, unknown, (*redis.Script).Eval)
	}
	for _, c := range batch {
		close(c.done)
	}
}

// pipeline sends calls in one pipeline, each with send, and sets their
// replies.
func (p *autoPipeline) pipeline(ctx context.Context, calls []*scriptCall, send func(*redis.Script, context.Context, redis.Scripter, []string, ...any) *redis.Cmd) {
	pipe := p.client.Pipeline()
	for _, c := range calls {
		c.reply = send(c.script, ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each reply holds its own error
}

// batchContext returns the context a batch is sent under: the first
// call's values (a tracing hook's span, say), without its cancellation,
// and the latest deadline of the calls if each has one, so that the
// pipeline outlives none of them and no call's end cuts off another's
// reply.
func batchContext(batch []*scriptCall) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithoutCancel(batch[0].ctx), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}
