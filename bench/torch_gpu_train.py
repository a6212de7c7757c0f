"""The anchor of gpu_train_bench: the same W2/W3 training steps in PyTorch on the same GPU, timed the same way
(synchronize after each step, median). Prints "RESULT <case> <median ms/step> <peak MiB on the device>".
Run where PyTorch with CUDA is installed; scripts/gpu_check.sh calls it when it can."""
import statistics
import time

import torch
from torch import nn


def median_ms(step, warmup, timed):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(timed):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def run(name, model, opt, x, y, warmup, timed):
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    ms = median_ms(step, warmup, timed)
    print(f"RESULT {name} {ms:.4f} {torch.cuda.max_memory_allocated() / 2**20:.1f}", flush=True)


def mlp(batch, name):
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 784, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    run(name, model, opt, x, y, 20, 200)


def cnn(batch, timed, name):
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 1, 28, 28, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    run(name, model, opt, x, y, 10, timed)


def set_tf32(on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


if __name__ == "__main__":
    # cuDNN autotuning off, as a user gets it. TF32 off for matmul and convolution alike, to compare with kiln's
    # default (true float32): PyTorch's own default turns TF32 on for cuDNN convolutions (not for matmul), which
    # would time TF32 convolutions against float32 ones. The _tf32 cases turn it on for both, on both sides.
    torch.backends.cudnn.benchmark = False
    set_tf32(False)
    mlp(128, "W2_mlp_b128")
    mlp(2048, "W2_mlp_b2048")
    cnn(64, 100, "W3_cnn_b64")
    cnn(1024, 30, "W3_cnn_b1024")
    set_tf32(True)
    mlp(2048, "W2_mlp_b2048_tf32")
    cnn(1024, 30, "W3_cnn_b1024_tf32")
