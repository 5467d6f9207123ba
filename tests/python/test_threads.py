"""One compiled model called from 4 Python threads at once: every result must be right."""
import threading

import torch

from updraft import zoo


def _hammer(compiled, model, n_threads=4, calls=15):
    errors = []
    barrier = threading.Barrier(n_threads)

    def worker(k):
        try:
            gen = torch.Generator().manual_seed(k)
            barrier.wait()
            for i in range(calls):
                x = torch.randn(1 + (k + i) % 3, 512, generator=gen)  # a few shapes: plan cache too
                with torch.no_grad():
                    got, want = compiled(x), model(x)
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        except Exception as e:  # reported below, with the thread's index
            errors.append((k, repr(e)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_four_threads_warm():
    model, (x,) = zoo.build("mlp")
    compiled = torch.compile(model, backend="updraft", dynamic=False)
    with torch.no_grad():
        for b in (1, 2, 3):  # compile every shape first: this test is about concurrent runs
            compiled(torch.randn(b, 512))
    _hammer(compiled, model)


def test_four_threads_cold_first_call():
    # The engine graph is built lazily at the first call; concurrent first calls must build once.
    model, _ = zoo.build("mlp")
    compiled = torch.compile(model, backend="updraft", dynamic=False)
    _hammer(compiled, model, calls=5)



def test_many_shapes_from_many_threads():
    """More shape signatures (40) than a partition keeps bound plans for (16), called from 16
    threads at once: binding one signature evicts another while other threads bind and look
    them up. A small model, so that the calls spend their time in that bookkeeping; the race
    it had showed ~7 times in 20000 calls (KeyError, or RuntimeError: dictionary changed size)."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    import updraft

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()).eval()
    compiled = torch.compile(model, backend="updraft", dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(2, 8))
    rep = updraft.last_report()
    assert rep.num_partitions == 1 and rep.partitions[0].status == "ok", str(rep)
    xs = {b: torch.randn(b, 8, generator=torch.Generator().manual_seed(b)) for b in range(2, 42)}
    sizes = [2 + (i * 7) % 40 for i in range(20000)]  # interleaved: most calls bind a new signature

    def call(b):
        with torch.no_grad():
            return compiled(xs[b])

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as the interpreter lets them
    try:
        with ThreadPoolExecutor(16) as pool:
            got = list(pool.map(call, sizes))
    finally:
        sys.setswitchinterval(old)
    with torch.no_grad():
        want = {b: model(x) for b, x in xs.items()}
    for b, out in zip(sizes, got):
        torch.testing.assert_close(out, want[b], rtol=1e-4, atol=1e-4)
    assert rep.partitions[0].status == "ok", str(rep)  # still run by the engine
