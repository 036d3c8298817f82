package testenv

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaProxy stands between Kafka clients and a cluster, one loopback
// listener per broker, and forwards every frame unchanged except the
// answers that name brokers: it rewrites the broker addresses in Metadata,
// FindCoordinator and DescribeCluster responses, and in the leader hints
// (KIP-951) of Produce, Fetch and share-group responses, to its own, so a
// client seeded with Addrs never connects to the real broker directly.
//
// It injects two faults, for the whole cluster at once: HoldAcks holds back
// the answers to produce requests writing to some topics, and Pause stops
// all traffic. It is there for fault tests whose clients are other
// processes (`driftguard process` binaries), which a kgo.Dialer or a kfake
// control function cannot reach into, on the real broker as on kfake. It
// speaks plaintext only (no TLS, no SASL).
type KafkaProxy struct {
	t     testing.TB
	seeds []string

	mu sync.Mutex
	// fronts maps a real broker's "host:port" to the listener standing
	// in for it.
	fronts map[string]net.Listener
	conns  map[*proxyConn]struct{}
	// topicNames resolves the topic ids of recent produce requests, from
	// the Metadata responses the proxy has passed on.
	topicNames map[[16]byte]string
	held       map[string]bool
	paused     bool
	// changed is closed, and replaced, whenever held or paused change, to
	// wake the frames waiting on them.
	changed  chan struct{}
	holding  int
	accepted int
	closed   bool
	err      error
	wg       sync.WaitGroup
}

// maxFrame bounds the frames the proxy reads: Kafka's own default for
// socket.request.max.bytes, so a corrupt size fails instead of allocating
// gigabytes.
const maxFrame = 100 << 20

// NewKafkaProxy starts a proxy of the cluster that brokers (seed addresses)
// belong to, with a listener for each broker the cluster's metadata names.
// It closes at the test's end, and fails the test then if it met a frame
// it could not follow.
func NewKafkaProxy(t testing.TB, brokers []string) *KafkaProxy {
	t.Helper()
	p := newKafkaProxy(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	meta, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		t.Fatalf("kafka proxy: the brokers of %v: %v", brokers, err)
	}
	for _, b := range meta.Brokers {
		host, port, err := p.front(b.Host, b.Port)
		if err != nil {
			t.Fatal(err)
		}
		p.seeds = append(p.seeds, net.JoinHostPort(host, strconv.Itoa(int(port))))
	}
	return p
}

// newKafkaProxy returns a proxy with no listener yet.
func newKafkaProxy(t testing.TB) *KafkaProxy {
	p := &KafkaProxy{
		t:          t,
		fronts:     map[string]net.Listener{},
		conns:      map[*proxyConn]struct{}{},
		topicNames: map[[16]byte]string{},
		held:       map[string]bool{},
		changed:    make(chan struct{}),
	}
	t.Cleanup(p.Close)
	return p
}

// Addrs returns the proxy's address of each broker, to seed clients with
// (DRIFTGUARD_KAFKA_BROKERS for a driftguard binary).
func (p *KafkaProxy) Addrs() []string { return slices.Clone(p.seeds) }

// HoldAcks holds back, from now until ReleaseAcks, the answer to every
// produce request that writes to one of topics (named by name or, in
// recent versions, by topic id). The broker gets the request and writes
// the records; only the acknowledgement waits, as with a broker slow to
// replicate. A produce answer already on its way to the client is not
// called back.
//
// Kafka answers a connection's requests in order, so every answer after a
// held one on the same connection waits with it. franz-go sends all of a
// client's produce requests to one broker on one connection, and batches
// the records of several topics into one request, so holding one topic
// holds all of that client's produce acks from that broker; its fetches
// and its group and transaction requests travel on other connections and
// go on, and other clients are unaffected. A client that waits longer
// than its produce request timeout plus kgo.RequestTimeoutOverhead (10s
// and 10s by default) drops the connection and retries on a new one,
// whose answer is held again; the broker drops the idempotent retry's
// duplicate records.
func (p *KafkaProxy) HoldAcks(topics ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, topic := range topics {
		p.held[topic] = true
	}
	p.changedLocked()
}

// ReleaseAcks lets every held produce answer through, and holds no more.
func (p *KafkaProxy) ReleaseAcks() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.held)
	p.changedLocked()
}

// Pause stops every frame, both ways, on every connection, until Resume:
// a broker that stopped answering, or a network that stopped carrying,
// while connections stay open. New connections are still accepted.
func (p *KafkaProxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
	p.changedLocked()
}

// Resume undoes Pause.
func (p *KafkaProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = false
	p.changedLocked()
}

// Holding returns how many frames the proxy is holding back right now:
// produce answers held by HoldAcks and frames stopped by Pause. A test
// waits for it to be non-zero to know that a fault has taken hold (say,
// before it kills the client whose acks are held).
func (p *KafkaProxy) Holding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holding
}

// Connections returns how many client connections the proxy has accepted.
func (p *KafkaProxy) Connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Close stops the listeners and cuts every connection. It runs at the
// test's end; calling it earlier is a broker that went away.
func (p *KafkaProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for _, ln := range p.fronts {
		ln.Close()
	}
	conns := slices.Collect(maps.Keys(p.conns))
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		p.t.Errorf("kafka proxy: %v", p.err)
	}
}

func (p *KafkaProxy) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// errProxyClosed is what asking for a new listener after Close meets: the
// end of a connection, not a frame the proxy could not follow.
var errProxyClosed = errors.New("kafka proxy closed")

// fail remembers the first frame the proxy could not follow, for Close to
// report; the connection it came on is then cut.
func (p *KafkaProxy) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil && !errors.Is(err, errProxyClosed) {
		p.err = err
	}
}

// front returns the proxy's address for the real broker at host:port,
// opening a listener for it the first time.
func (p *KafkaProxy) front(host string, port int32) (string, int32, error) {
	real := net.JoinHostPort(host, strconv.Itoa(int(port)))
	p.mu.Lock()
	defer p.mu.Unlock()
	ln := p.fronts[real]
	if ln == nil {
		if p.closed {
			return "", 0, errProxyClosed
		}
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return "", 0, fmt.Errorf("kafka proxy of %s: %w", real, err)
		}
		p.fronts[real] = ln
		p.wg.Go(func() { p.accept(ln, real) })
	}
	addr := ln.Addr().(*net.TCPAddr)
	return addr.IP.String(), int32(addr.Port), nil
}

// accept serves ln's clients, each on a connection of its own to the real
// broker.
func (p *KafkaProxy) accept(ln net.Listener, real string) {
	for {
		client, err := ln.Accept()
		if err != nil {
			return
		}
		broker, err := net.DialTimeout("tcp", real, 10*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		c := &proxyConn{p: p, client: client, broker: broker, done: make(chan struct{}), pending: map[int32]request{}}
		p.mu.Lock()
		p.accepted++
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { c.pump(client, broker, c.request) })
		p.wg.Go(func() { c.pump(broker, client, c.response) })
	}
}

// wait blocks a frame while the proxy is paused or, for the answer to
// produce, while it holds one of produce's topics. It reports false when
// the connection closed first.
func (p *KafkaProxy) wait(done <-chan struct{}, produce *request) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	counted := false
	for p.paused || (produce != nil && p.holdsLocked(produce)) {
		if !counted {
			p.holding++
			counted = true
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-done:
			p.mu.Lock()
			p.holding--
			return false
		}
		p.mu.Lock()
	}
	if counted {
		p.holding--
	}
	return true
}

func (p *KafkaProxy) holdsLocked(produce *request) bool {
	for _, topic := range produce.topics {
		if p.held[topic] {
			return true
		}
	}
	for _, id := range produce.topicIDs {
		if name, ok := p.topicNames[id]; ok && p.held[name] {
			return true
		}
	}
	return false
}

// proxyConn is one client connection and the proxy's own connection to the
// broker behind it.
type proxyConn struct {
	p              *KafkaProxy
	client, broker net.Conn
	done           chan struct{}
	once           sync.Once

	mu sync.Mutex
	// pending are the requests sent and not yet answered, by correlation
	// id: a response says only its correlation id, and how to read it
	// depends on its request's key and version.
	pending map[int32]request
}

// request is what the proxy keeps of a request until its answer.
type request struct {
	key, version int16
	// The topics a produce request writes to, by name or by id.
	topics   []string
	topicIDs [][16]byte
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		close(c.done)
		c.client.Close()
		c.broker.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// pump reads frames from src until it ends, and writes what pass makes of
// each to dst; pass returns false to cut the connection.
func (c *proxyConn) pump(src, dst net.Conn, pass func(frame []byte) ([]byte, bool)) {
	defer c.close()
	r := bufio.NewReader(src)
	for {
		frame, err := readFrame(r)
		if err != nil {
			return
		}
		frame, ok := pass(frame)
		if !ok {
			return
		}
		if _, err := dst.Write(frame); err != nil {
			return
		}
	}
}

// request passes a client's request on to the broker, and remembers what
// its answer will need.
func (c *proxyConn) request(frame []byte) ([]byte, bool) {
	corr, req, answered, err := parseRequest(frame)
	if err != nil {
		c.p.fail(err)
		return nil, false
	}
	if !c.p.wait(c.done, nil) {
		return nil, false
	}
	if answered {
		c.mu.Lock()
		c.pending[corr] = req
		c.mu.Unlock()
	}
	return frame, true
}

// response passes the broker's answer on to the client, rewritten where it
// names brokers, and held while a fault says so.
func (c *proxyConn) response(frame []byte) ([]byte, bool) {
	if len(frame) < 8 {
		c.p.fail(fmt.Errorf("a response of %d bytes has no correlation id", len(frame)))
		return nil, false
	}
	corr := int32(binary.BigEndian.Uint32(frame[4:]))
	c.mu.Lock()
	req, ok := c.pending[corr]
	delete(c.pending, corr)
	c.mu.Unlock()
	if !ok {
		c.p.fail(fmt.Errorf("a response to correlation id %d, which no request had", corr))
		return nil, false
	}
	frame, err := c.p.rewrite(req, frame)
	if err != nil {
		c.p.fail(err)
		return nil, false
	}
	var produce *request
	if req.key == int16(kmsg.Produce) {
		produce = &req
	}
	return frame, c.p.wait(c.done, produce)
}

// readFrame reads one size-prefixed frame and returns it with its size.
func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n > maxFrame {
		return nil, fmt.Errorf("a frame of %d bytes", n)
	}
	frame := make([]byte, 4+n)
	copy(frame, size[:])
	_, err := io.ReadFull(r, frame[4:])
	return frame, err
}

// parseRequest reads a request frame's header and, for produce, the topics
// it writes to; answered is false for a request the broker never answers
// (produce with acks=0).
func parseRequest(frame []byte) (corr int32, req request, answered bool, err error) {
	if len(frame) < 12 {
		return 0, req, false, fmt.Errorf("a request of %d bytes has no header", len(frame))
	}
	req.key = int16(binary.BigEndian.Uint16(frame[4:]))
	req.version = int16(binary.BigEndian.Uint16(frame[6:]))
	corr = int32(binary.BigEndian.Uint32(frame[8:]))
	if req.key != int16(kmsg.Produce) {
		return corr, req, true, nil
	}
	produce := kmsg.NewPtrProduceRequest()
	produce.Version = req.version
	body, err := skipRequestHeader(frame[12:], req.key, req.version, produce.IsFlexible())
	if err == nil {
		err = produce.ReadFrom(body)
	}
	if err != nil {
		return 0, req, false, fmt.Errorf("produce v%d request: %w", req.version, err)
	}
	for _, topic := range produce.Topics {
		if topic.Topic != "" {
			req.topics = append(req.topics, topic.Topic)
		} else {
			req.topicIDs = append(req.topicIDs, topic.TopicID)
		}
	}
	return corr, req, produce.Acks != 0, nil
}

// skipRequestHeader skips the client id and, in flexible versions, the
// header's tagged fields, which follow the key, version and correlation id.
func skipRequestHeader(b []byte, key, version int16, flexible bool) ([]byte, error) {
	// ControlledShutdown v0 has no client id.
	if key != int16(kmsg.ControlledShutdown) || version != 0 {
		if len(b) < 2 {
			return nil, io.ErrUnexpectedEOF
		}
		n := int(int16(binary.BigEndian.Uint16(b)))
		b = b[2:]
		if n > len(b) {
			return nil, io.ErrUnexpectedEOF
		}
		b = b[max(n, 0):]
	}
	if flexible {
		return skipTags(b)
	}
	return b, nil
}

// skipTags skips a tagged-field section: a count, then each field's tag,
// size and bytes, all but the bytes unsigned varints.
func skipTags(b []byte) ([]byte, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, io.ErrUnexpectedEOF
	}
	b = b[n:]
	for range count {
		if _, n = binary.Uvarint(b); n <= 0 {
			return nil, io.ErrUnexpectedEOF
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || size > uint64(len(b)-n) {
			return nil, io.ErrUnexpectedEOF
		}
		b = b[n+int(size):]
	}
	return b, nil
}

// rewrite returns frame, the answer to req, with the broker addresses in
// it replaced by the proxy's; the answers that cannot name a broker pass
// byte for byte.
func (p *KafkaProxy) rewrite(req request, frame []byte) ([]byte, error) {
	var resp kmsg.Response
	switch kmsg.Key(req.key) {
	case kmsg.Metadata, kmsg.FindCoordinator, kmsg.DescribeCluster, kmsg.ShareFetch, kmsg.ShareAcknowledge:
		resp = kmsg.ResponseForKey(req.key)
	case kmsg.Produce:
		if req.version >= 10 { // leader hints since v10
			resp = kmsg.NewPtrProduceResponse()
		}
	case kmsg.Fetch:
		if req.version >= 16 { // leader hints since v16
			resp = kmsg.NewPtrFetchResponse()
		}
	}
	if resp == nil {
		return frame, nil
	}
	resp.SetVersion(req.version)
	header := frame[:8] // size and correlation id
	body := frame[8:]
	// A flexible answer's header has tagged fields after the correlation
	// id (ApiVersions' never does, but it is not rewritten).
	if resp.IsFlexible() {
		rest, err := skipTags(body)
		if err != nil {
			return nil, fmt.Errorf("%s v%d response header: %w", kmsg.NameForKey(req.key), req.version, err)
		}
		header, body = frame[:len(frame)-len(rest)], rest
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("%s v%d response: %w", kmsg.NameForKey(req.key), req.version, err)
	}
	changed, err := p.rewriteBrokers(resp)
	if err != nil || !changed {
		return frame, err
	}
	out := resp.AppendTo(slices.Clone(header))
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out, nil
}

// rewriteBrokers points every broker address in resp at the proxy, and
// learns the topic ids of a Metadata answer; it reports whether resp
// changed.
func (p *KafkaProxy) rewriteBrokers(resp kmsg.Response) (changed bool, err error) {
	if meta, ok := resp.(*kmsg.MetadataResponse); ok {
		p.mu.Lock()
		for _, topic := range meta.Topics {
			if topic.Topic != nil && topic.TopicID != [16]byte{} {
				p.topicNames[topic.TopicID] = *topic.Topic
			}
		}
		p.mu.Unlock()
	}
	err = p.pointAtProxy(reflect.ValueOf(resp), &changed)
	return changed, err
}

// pointAtProxy rewrites every broker address in v, a decoded answer or a
// part of it. Every answer names a broker the same way, in a struct with a
// Host string and a Port int32 (a metadata broker, a coordinator, a leader
// hint), so one walk serves them all, and whatever answer kmsg adds them
// to next.
func (p *KafkaProxy) pointAtProxy(v reflect.Value, changed *bool) error {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			return p.pointAtProxy(v.Elem(), changed)
		}
	case reflect.Slice:
		// Raw bytes (record batches) hold no broker.
		if k := v.Type().Elem().Kind(); k != reflect.Struct && k != reflect.Pointer {
			return nil
		}
		for i := range v.Len() {
			if err := p.pointAtProxy(v.Index(i), changed); err != nil {
				return err
			}
		}
	case reflect.Struct:
		host, port := v.FieldByName("Host"), v.FieldByName("Port")
		// An error answer names no broker: an empty host, port -1.
		if host.Kind() == reflect.String && port.Kind() == reflect.Int32 && host.String() != "" && port.Int() >= 0 {
			h, pt, err := p.front(host.String(), int32(port.Int()))
			if err != nil {
				return err
			}
			host.SetString(h)
			port.SetInt(int64(pt))
			*changed = true
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				if err := p.pointAtProxy(v.Field(i), changed); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
