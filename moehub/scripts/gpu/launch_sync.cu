// Launch, CUDA-graph and host-sync latencies of one GPU, without any framework on top.
//
// Measures what the co-simulation's software constants stand for (config/system/*.yaml,
// `software:`): the host cost of one eager kernel launch, the GPU time per kernel when
// kernels run back to back eagerly and inside a CUDA graph, a graph launch, and the
// round trip of a 4-byte device-to-host copy with a stream synchronize (the host sync of a
// dispatcher that reads its split sizes). Prints one JSON object; every figure is the
// median of many repetitions, in microseconds.
//
// Build and run on the GPU machine:  nvcc -O2 -arch=sm_90 launch_sync.cu -o launch_sync
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

using clk = std::chrono::steady_clock;

__global__ void empty_kernel(int *p) {
    // reads memory so the compiler keeps the kernel; never true at run time
    if (threadIdx.x == 0 && blockIdx.x == 0 && p[0] == 12345) p[1] = 1;
}

static double us_between(clk::time_point a, clk::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static double event_us(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0; CK(cudaEventElapsedTime(&ms, a, b)); return 1000.0 * ms;
}

int main() {
    const int REPS = 2000, BATCH = 100, BATCHES = 200;
    int *dev; CK(cudaMalloc(&dev, 64)); CK(cudaMemset(dev, 0, 64));
    int *pinned; CK(cudaMallocHost(&pinned, 64));
    int *pageable = (int *)malloc(64);
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int i = 0; i < 2000; i++) empty_kernel<<<1, 32, 0, s>>>(dev);
    CK(cudaStreamSynchronize(s));

    // 1. host cost of one eager launch: a batch of launches, well under the queue depth
    std::vector<double> host_launch;
    for (int b = 0; b < BATCHES; b++) {
        auto t0 = clk::now();
        for (int i = 0; i < BATCH; i++) empty_kernel<<<1, 32, 0, s>>>(dev);
        auto t1 = clk::now();
        CK(cudaStreamSynchronize(s));
        host_launch.push_back(us_between(t0, t1) / BATCH);
    }
    // 2. GPU time per kernel, eager, back to back (the host runs ahead)
    std::vector<double> gpu_eager;
    for (int b = 0; b < 50; b++) {
        CK(cudaEventRecord(e0, s));
        for (int i = 0; i < 1000; i++) empty_kernel<<<1, 32, 0, s>>>(dev);
        CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
        gpu_eager.push_back(event_us(e0, e1) / 1000);
    }
    // 3. one launch + stream synchronize, from an idle stream (the launch latency a kernel
    //    after a host sync pays)
    std::vector<double> launch_sync;
    for (int r = 0; r < REPS; r++) {
        auto t0 = clk::now();
        empty_kernel<<<1, 32, 0, s>>>(dev);
        CK(cudaStreamSynchronize(s));
        launch_sync.push_back(us_between(t0, clk::now()));
    }
    // 4. CUDA graphs: 100 kernels captured; GPU time per kernel inside the graph, the host
    //    cost of a graph launch, and launch + sync of a one-kernel graph
    cudaGraph_t g100, g1; cudaGraphExec_t x100, x1;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < 100; i++) empty_kernel<<<1, 32, 0, s>>>(dev);
    CK(cudaStreamEndCapture(s, &g100));
    CK(cudaGraphInstantiate(&x100, g100, 0));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    empty_kernel<<<1, 32, 0, s>>>(dev);
    CK(cudaStreamEndCapture(s, &g1));
    CK(cudaGraphInstantiate(&x1, g1, 0));
    for (int i = 0; i < 50; i++) CK(cudaGraphLaunch(x100, s));
    CK(cudaStreamSynchronize(s));
    std::vector<double> gpu_graph, host_graph, graph_sync;
    for (int b = 0; b < 50; b++) {
        CK(cudaEventRecord(e0, s));
        auto t0 = clk::now();
        for (int i = 0; i < 10; i++) CK(cudaGraphLaunch(x100, s));
        auto t1 = clk::now();
        CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
        gpu_graph.push_back(event_us(e0, e1) / 1000);
        host_graph.push_back(us_between(t0, t1) / 10);
    }
    for (int r = 0; r < REPS; r++) {
        auto t0 = clk::now();
        CK(cudaGraphLaunch(x1, s));
        CK(cudaStreamSynchronize(s));
        graph_sync.push_back(us_between(t0, clk::now()));
    }
    // 5. 4-byte device-to-host copy + synchronize (pinned and pageable host memory), and a
    //    kernel followed by that copy (a count kernel whose result the host reads)
    std::vector<double> d2h_pinned, d2h_pageable, kernel_d2h, h2d_pinned;
    for (int r = 0; r < REPS; r++) {
        auto t0 = clk::now();
        CK(cudaMemcpyAsync(pinned, dev, 4, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        d2h_pinned.push_back(us_between(t0, clk::now()));
    }
    for (int r = 0; r < REPS; r++) {
        auto t0 = clk::now();
        CK(cudaMemcpyAsync(pageable, dev, 4, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        d2h_pageable.push_back(us_between(t0, clk::now()));
    }
    for (int r = 0; r < REPS; r++) {
        auto t0 = clk::now();
        empty_kernel<<<1, 32, 0, s>>>(dev);
        CK(cudaMemcpyAsync(pinned, dev, 4, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        kernel_d2h.push_back(us_between(t0, clk::now()));
    }
    for (int r = 0; r < REPS; r++) {
        auto t0 = clk::now();
        CK(cudaMemcpyAsync(dev, pinned, 4, cudaMemcpyHostToDevice, s));
        CK(cudaStreamSynchronize(s));
        h2d_pinned.push_back(us_between(t0, clk::now()));
    }
    cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
    int drv = 0, rt = 0; CK(cudaDriverGetVersion(&drv)); CK(cudaRuntimeGetVersion(&rt));
    printf("{\"device\": \"%s\", \"sms\": %d, \"driver\": %d, \"runtime\": %d,\n", prop.name,
           prop.multiProcessorCount, drv, rt);
    printf(" \"host_launch_us\": %.3f, \"gpu_eager_per_kernel_us\": %.3f,\n", median(host_launch), median(gpu_eager));
    printf(" \"launch_sync_us\": %.3f, \"gpu_graph_per_kernel_us\": %.3f,\n", median(launch_sync), median(gpu_graph));
    printf(" \"host_graph_launch_us\": %.3f, \"graph1_launch_sync_us\": %.3f,\n", median(host_graph), median(graph_sync));
    printf(" \"d2h4_pinned_sync_us\": %.3f, \"d2h4_pageable_sync_us\": %.3f,\n", median(d2h_pinned), median(d2h_pageable));
    printf(" \"kernel_d2h4_sync_us\": %.3f, \"h2d4_pinned_sync_us\": %.3f,\n", median(kernel_d2h), median(h2d_pinned));
    printf(" \"reps\": %d, \"batch\": %d}\n", REPS, BATCH);
    return 0;
}
