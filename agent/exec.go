package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"sandbox-operator/agent/upstream"
)

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ---- reaper: as PID 1 we reap every child; statuses of our own processes are routed to waiters ----

var (
	procMu sync.Mutex
	procs  = map[int]chan syscall.WaitStatus{}
	// haveChild wakes the reaper when it found no children and spawn has since made one.
	haveChild = make(chan struct{}, 1)
)

// startReaper runs the one place that waits for children: a goroutine blocked in wait4(-1). Every
// child is reaped, orphans included (as PID 1 we inherit them); the status of a process we spawned is
// routed to its waiter. Blocking in wait4 instead of reacting to SIGCHLD keeps signal delivery, the
// os/signal goroutine and a channel hop off the path of every exec.
func startReaper() {
	go func() {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil { // ECHILD: nothing to wait for until spawn makes a child
				<-haveChild
				continue
			}
			procMu.Lock()
			if c, ok := procs[pid]; ok {
				delete(procs, pid)
				c <- ws
			}
			procMu.Unlock()
		}
	}()
}

// spawn forks under procMu so the reaper cannot see the exit before the waiter is registered.
func spawn(argv0 string, argv []string, attr *syscall.ProcAttr) (int, chan syscall.WaitStatus, error) {
	procMu.Lock()
	defer procMu.Unlock()
	pid, err := syscall.ForkExec(argv0, argv, attr)
	if err != nil {
		return 0, nil, err
	}
	c := make(chan syscall.WaitStatus, 1)
	procs[pid] = c
	select {
	case haveChild <- struct{}{}:
	default:
	}
	return pid, c, nil
}

func lookPath(name, path string) (string, error) {
	if p, ok := upstream.FindExecutable(name, path); ok {
		return p, nil
	}
	return "", newOpError("ENOENT", fmt.Sprintf("executable %q not found in PATH", name))
}

func ioctl(fd uintptr, req uintptr, arg unsafe.Pointer) error {
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

const (
	tiocsptlck = 0x40045431
	tiocgptn   = 0x80045430
)

type winsize struct{ Row, Col, X, Y uint16 }

func setWinsize(f *os.File, cols, rows int) error {
	ws := winsize{Row: uint16(rows), Col: uint16(cols)}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) { ierr = ioctl(fd, syscall.TIOCSWINSZ, unsafe.Pointer(&ws)) }); err != nil {
		return err
	}
	return ierr
}

func openPty() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	rc, err := master.SyscallConn()
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	var n uint32
	var ierr error
	_ = rc.Control(func(fd uintptr) {
		var unlock int32
		if ierr = ioctl(fd, tiocsptlck, unsafe.Pointer(&unlock)); ierr == nil {
			ierr = ioctl(fd, tiocgptn, unsafe.Pointer(&n))
		}
	})
	if ierr != nil {
		master.Close()
		return nil, nil, ierr
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

const chunk = 32 << 10

// pump copies r to frames of type t until EOF/error, then signals wg. It reads straight into the
// payload area of a frame buffer, so a chunk is copied once (kernel to frame), not three times. A chunk is sent
// only as the stream's credit allows: a host that does not take the output stops this process (its pipe fills),
// not the VM. Credit is claimed after the read, for bytes in hand: stdout and stderr share it, and a pump idle in
// read must not hold any.
func (s *session) pump(id uint32, t byte, r *os.File, credit *outCredit, wg *sync.WaitGroup) {
	defer wg.Done()
	buf := make([]byte, HeaderLen+chunk)
	for {
		n, err := r.Read(buf[HeaderLen:])
		for off := 0; off < n; {
			k := credit.take(n-off, s.done)
			// The header goes right before the unsent bytes, over bytes already sent (writeFrame has returned).
			putHeader(buf[off:], t, id, k)
			s.writeFrame(buf[off : off+HeaderLen+k])
			off += k
		}
		if err != nil {
			return
		}
	}
}

func signalName(sig syscall.Signal) string {
	names := map[syscall.Signal]string{syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
		syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2",
		syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGABRT: "SIGABRT", syscall.SIGSEGV: "SIGSEGV"}
	if n, ok := names[sig]; ok {
		return n
	}
	return fmt.Sprintf("SIG%d", int(sig))
}

func (s *session) startExec(id uint32, req *Request) {
	if len(req.Argv) == 0 {
		s.reply(id, nil, newOpError("EINVAL", "argv is empty"))
		return
	}
	envMap := map[string]string{"PATH": defaultPath, "HOME": "/root", "LANG": "C.UTF-8"}
	if req.Pty != nil {
		envMap["TERM"] = "xterm-256color"
	}
	for k, v := range req.Env {
		envMap[k] = v
	}
	env := make([]string, 0, len(envMap))
	for k, v := range envMap {
		env = append(env, k+"="+v)
	}
	pathVar := defaultPath
	if p, ok := req.Env["PATH"]; ok {
		pathVar = p
	}
	bin, err := lookPath(req.Argv[0], pathVar)
	if err != nil {
		s.reply(id, nil, err)
		return
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/"
	}
	sys := &syscall.SysProcAttr{Setpgid: true}
	if req.UID != nil || req.GID != nil {
		cred := &syscall.Credential{}
		if req.UID != nil {
			cred.Uid = uint32(*req.UID)
		}
		if req.GID != nil {
			cred.Gid = uint32(*req.GID)
		}
		sys.Credential = cred
	}

	var closeAfterStart []*os.File
	var outR, errR, stdinW, master *os.File
	var files []uintptr
	fail := func(err error) {
		for _, f := range closeAfterStart {
			f.Close()
		}
		for _, f := range []*os.File{outR, errR, stdinW, master} {
			if f != nil {
				f.Close()
			}
		}
		s.reply(id, nil, err)
	}
	if req.Pty != nil {
		m, sl, err := openPty()
		if err != nil {
			fail(err)
			return
		}
		master = m
		closeAfterStart = append(closeAfterStart, sl)
		if req.Pty.Cols > 0 && req.Pty.Rows > 0 {
			_ = setWinsize(master, req.Pty.Cols, req.Pty.Rows)
		}
		files = []uintptr{sl.Fd(), sl.Fd(), sl.Fd()}
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Credential: sys.Credential}
	} else {
		var inR *os.File
		if req.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				fail(err)
				return
			}
			inR, stdinW = r, w
		} else {
			n, err := os.Open(os.DevNull)
			if err != nil {
				fail(err)
				return
			}
			inR = n
		}
		closeAfterStart = append(closeAfterStart, inR)
		or, ow, err := os.Pipe()
		if err != nil {
			fail(err)
			return
		}
		outR = or
		closeAfterStart = append(closeAfterStart, ow)
		er, ew, err := os.Pipe()
		if err != nil {
			fail(err)
			return
		}
		errR = er
		closeAfterStart = append(closeAfterStart, ew)
		files = []uintptr{inR.Fd(), ow.Fd(), ew.Fd()}
	}
	st := &stream{out: s.newOutCredit()}
	// cancel: the host dropped the stream (it gave up waiting); the process runs on, its output is dropped.
	st.cancel = st.out.release
	var pid int
	st.signal = func(sig int) error {
		if pid <= 0 {
			return newOpError("ESRCH", "process not started")
		}
		// Signal the whole process group, so `sh -c` children go too.
		if err := syscall.Kill(-pid, syscall.Signal(sig)); err != nil {
			return syscall.Kill(pid, syscall.Signal(sig))
		}
		return nil
	}
	if master != nil {
		st.resize = func(cols, rows int) error { return setWinsize(master, cols, rows) }
	}
	stdinTarget := stdinW
	if master != nil {
		stdinTarget = master
	}
	if stdinTarget != nil {
		st.in = s.newInbox(id)
	}
	if err := s.register(id, st); err != nil {
		fail(err)
		return
	}
	p, wait, err := spawn(bin, req.Argv, &syscall.ProcAttr{Dir: cwd, Env: env, Files: files, Sys: sys})
	for _, f := range closeAfterStart {
		f.Close()
	}
	if err != nil {
		for _, f := range []*os.File{outR, errR, stdinW, master} {
			if f != nil {
				f.Close()
			}
		}
		s.reply(id, nil, err)
		return
	}
	pid = p
	s.send(TEvt, id, append(strconv.AppendInt([]byte(`{"type":"started","pid":`), int64(pid), 10), '}'))

	procDone := make(chan struct{})
	if st.in != nil {
		in := st.in
		go func() {
			for {
				data, ok := in.get(procDone)
				if !ok {
					if in.overran() && stdinW != nil {
						stdinW.Close() // the host broke the window: end the input
					}
					return
				}
				if len(data) == 0 {
					if stdinW != nil {
						stdinW.Close()
					} else if master != nil {
						_, _ = master.Write([]byte{4}) // ^D
					}
					continue
				}
				// A process that does not read its stdin blocks only this goroutine; the host sends no more than
				// the window until this write has taken what it has.
				_, _ = stdinTarget.Write(data)
				in.consumed(len(data))
			}
		}()
	}
	var wg sync.WaitGroup
	if master != nil {
		wg.Add(1)
		go s.pump(id, TOut, master, st.out, &wg)
	} else {
		wg.Add(2)
		go s.pump(id, TOut, outR, st.out, &wg)
		go s.pump(id, TErr, errR, st.out, &wg)
	}
	go func() {
		timedOut := false
		var ws syscall.WaitStatus
		if req.TimeoutMs > 0 {
			t := time.NewTimer(time.Duration(req.TimeoutMs) * time.Millisecond)
			select {
			case ws = <-wait:
			case <-t.C:
				timedOut = true
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				ws = <-wait
			}
			t.Stop()
		} else {
			ws = <-wait
		}
		// Drain output; a background grandchild may hold the pipes open, so bound the wait. Time spent waiting
		// for the host to take output (credit) does not count: what the process wrote before it exited is sent.
		drained := make(chan struct{})
		go func() { wg.Wait(); close(drained) }()
		for waiting := true; waiting; {
			select {
			case <-drained:
				waiting = false
			case <-time.After(500 * time.Millisecond):
				waiting = st.out.blocked()
			}
		}
		for _, f := range []*os.File{outR, errR, stdinW, master} {
			if f != nil {
				f.Close()
			}
		}
		<-drained
		close(procDone)
		if st.in != nil {
			st.in.close()
		}
		s.unregister(id)
		s.send(TRes, id, exitResult(ws, timedOut))
	}()
}

// exitResult is the final response of an exec, formatted by hand: it is on the path of every command,
// and reflection-driven encoding is a lot of cold guest code in a fresh clone.
func exitResult(ws syscall.WaitStatus, timedOut bool) []byte {
	code := ws.ExitStatus()
	b := []byte(`{"ok":true,"exitCode":`)
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, `,"timedOut":`...)
	b = strconv.AppendBool(b, timedOut)
	if ws.Signaled() {
		b = append(b, `,"signal":"`...)
		b = append(b, signalName(ws.Signal())...)
		b = append(b, '"')
	}
	return append(b, '}')
}
