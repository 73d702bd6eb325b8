package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscribeWithin bounds the wait for a subscription's confirmation, so that
// a silent server makes Watch fail and its caller poll.
const subscribeWithin = 3 * time.Second

// errSubscriberClosed fails a watch that joined a subscriber as it closed.
var errSubscriberClosed = errors.New("the subscription's connection was closed")

// subscribers are a store's subscribers, one per server with watched
// records.
type subscribers struct {
	mu     sync.Mutex
	byNode map[*redis.Client]*subscriber
}

// join subscribes to channel on node's subscriber and returns it and the
// channel's topic once the server confirmed. Unless it fails, the caller
// calls sub.leave(topic) when it stops waiting.
func (ss *subscribers) join(ctx context.Context, node *redis.Client, channel string) (*subscriber, *topic, error) {
	ss.mu.Lock()
	sub := ss.byNode[node]
	if sub == nil || !sub.enter() {
		sub = ss.start(node)
		sub.enter()
	}
	ss.mu.Unlock()
	t, err := sub.subscribe(ctx, channel)
	if err != nil {
		sub.leave(t)
		return nil, nil, err
	}
	return sub, t, nil
}

// start starts a subscriber to node and records it; ss.mu is held.
func (ss *subscribers) start(node *redis.Client) *subscriber {
	sub := &subscriber{
		ps:     node.SSubscribe(context.Background()),
		exited: make(chan struct{}),
		topics: map[string]*topic{},
	}
	sub.forget = func() {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if ss.byNode[node] == sub {
			delete(ss.byNode, node)
		}
	}
	if ss.byNode == nil {
		ss.byNode = map[*redis.Client]*subscriber{}
	}
	ss.byNode[node] = sub
	go sub.read()
	return sub
}

// subscriber is one pub/sub connection to one server, shared by its
// watches, and its reading goroutine. It dies with its connection, waking
// every watch, since a dropped connection may have missed publications.
type subscriber struct {
	ps     *redis.PubSub
	exited chan struct{} // closed when read returns
	forget func()        // removes the subscriber from its subscribers

	mu      sync.Mutex
	watches int // unconfirmed ones included
	topics  map[string]*topic
	dead    bool
	cause   error // unless it closed with its last watch
}

// topic is one channel of a subscriber, shared by the watches of one key.
// It is removed (and unsubscribed) only once confirmed, so that a reply to
// SSUBSCRIBE always belongs to the channel's current topic. Once confirmed,
// a message or SUNSUBSCRIBE reply on the channel fires it: the record
// changed, or the server dropped the subscription (a moved slot, a late
// unsubscription of an earlier topic).
type topic struct {
	channel    string
	watches    int
	confirmed  bool
	subscribed chan struct{} // closed when confirmed, or when the subscriber died first
	changed    chan struct{} // closed when fired
	fired      bool
}

// enter counts one more watch, and reports false if sub is dead.
func (sub *subscriber) enter() bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.dead {
		sub.watches++
	}
	return !sub.dead
}

// subscribe adds a watch to channel's topic, subscribing if it is new, and
// waits for the confirmation.
func (sub *subscriber) subscribe(ctx context.Context, channel string) (*topic, error) {
	sub.mu.Lock()
	if sub.dead {
		sub.mu.Unlock()
		return nil, errSubscriberClosed
	}
	t := sub.topics[channel]
	first := t == nil
	if first {
		t = &topic{channel: channel, subscribed: make(chan struct{}), changed: make(chan struct{})}
		sub.topics[channel] = t
	}
	t.watches++
	sub.mu.Unlock()
	if first {
		// Not under ctx: a write that times out drops the shared connection.
		if err := sub.ps.SSubscribe(context.WithoutCancel(ctx), channel); err != nil {
			sub.die(err)
			return t, err
		}
	}
	timer := time.NewTimer(subscribeWithin)
	defer timer.Stop()
	select {
	case <-t.subscribed:
	case <-ctx.Done():
		return t, ctx.Err()
	case <-timer.C:
		err := errors.New("no confirmation of the subscription within " + subscribeWithin.String())
		sub.die(err)
		return t, err
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !t.confirmed {
		return t, sub.cause
	}
	return t, nil
}

// leave ends a watch of t (nil if it has none yet); the last watch of the
// subscriber closes it and waits for its goroutine.
func (sub *subscriber) leave(t *topic) {
	sub.mu.Lock()
	channel := ""
	if t != nil {
		t.watches--
		if t.watches == 0 && t.confirmed && !t.fired {
			channel = sub.remove(t)
		}
	}
	sub.watches--
	last := sub.watches == 0
	sub.dead = sub.dead || last // now, so that no watch enters it meanwhile
	sub.mu.Unlock()
	if last {
		sub.close()
		<-sub.exited
		return
	}
	sub.unsubscribe(channel)
}

// read handles the connection's replies and messages until it fails or
// closes.
func (sub *subscriber) read() {
	defer close(sub.exited)
	for {
		msg, err := sub.ps.Receive(context.Background())
		if err != nil {
			sub.die(err)
			return
		}
		sub.unsubscribe(sub.handle(msg))
	}
}

// handle applies a reply or message to its topic, and returns the channel
// to unsubscribe from, if any.
func (sub *subscriber) handle(msg any) string {
	var channel string
	confirmation := false
	switch m := msg.(type) {
	case *redis.Subscription:
		channel, confirmation = m.Channel, m.Kind == "ssubscribe"
	case *redis.Message:
		channel = m.Channel
	default:
		return ""
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	t := sub.topics[channel]
	switch {
	case t == nil || confirmation == t.confirmed:
		// For an earlier topic, or a confirmation repeated.
		return ""
	case confirmation:
		t.confirmed = true
		close(t.subscribed)
		if t.watches == 0 {
			return sub.remove(t)
		}
		return ""
	default:
		t.fired = true
		close(t.changed)
		channel = sub.remove(t)
		if _, unsubscribed := msg.(*redis.Subscription); unsubscribed {
			return ""
		}
		return channel
	}
}

// remove removes t and returns its channel; sub.mu is held.
func (sub *subscriber) remove(t *topic) string {
	delete(sub.topics, t.channel)
	return t.channel
}

// unsubscribe unsubscribes from channel, unless empty. A failure breaks
// the connection, which fails read and so kills the subscriber.
func (sub *subscriber) unsubscribe(channel string) {
	if channel != "" {
		_ = sub.ps.SUnsubscribe(context.Background(), channel)
	}
}

// die kills the subscriber for cause, once: confirmed topics fire (a
// message may have been missed), unconfirmed ones fail with cause.
func (sub *subscriber) die(cause error) {
	sub.mu.Lock()
	if sub.dead {
		sub.mu.Unlock()
		return
	}
	sub.dead, sub.cause = true, cause
	for channel, t := range sub.topics {
		if t.confirmed {
			t.fired = true
			close(t.changed)
		} else {
			close(t.subscribed)
		}
		delete(sub.topics, channel)
	}
	sub.mu.Unlock()
	sub.close()
}

// close forgets a dead subscriber, so the next watch starts another, and
// closes its connection, which ends read.
func (sub *subscriber) close() {
	sub.forget()
	_ = sub.ps.Close()
}
