"""Holds the attempt lock while no process has it open (issue 10 item 5 tests).

Run as a task's command: ``python3 hold_lock_in_flight.py PIDFILE``. It finds the attempt's
lock fd, sends it over a socketpair and closes it; a ``setsid`` child keeps the receiving
end, so the fd stays in flight: the lock is held, and no ``/proc/*/fd`` entry shows it. The
child writes its pid to PIDFILE (for the test's cleanup) and sleeps 300 s.
"""
import os
import socket
import sys
import time

pidfile = sys.argv[1]
lock = None
for name in os.listdir('/proc/self/fd'):
    try:
        if os.readlink('/proc/self/fd/' + name).endswith('.lock'):
            lock = int(name)
    except OSError:
        pass
a, b = socket.socketpair()
socket.send_fds(a, [b'x'], [lock])
os.close(lock)
a.close()
if os.fork() == 0:
    os.setsid()
    with open(pidfile + '.tmp', 'w') as fh:
        fh.write(str(os.getpid()))
    os.rename(pidfile + '.tmp', pidfile)
    time.sleep(300)
    os._exit(0)
while not os.path.exists(pidfile):
    time.sleep(0.01)
