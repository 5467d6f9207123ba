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
