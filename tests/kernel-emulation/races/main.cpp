// Every kernel of the GPU backend once, under ThreadSanitizer (run.sh builds and runs this): the
// emulation runs a block's threads at once, so two threads of a block that touch one value
// without a barrier or an atomic between them are a data race it reports. The values computed
// are checked by the Rust tests (../tests); here only the accesses matter. Shapes straddle the
// block size: rows of 40 and 260 scores, 300 classes, LayerNorm rows of 700. Grids are as small
// as that allows (each block's barriers cost 256 threads' switches under the sanitizer): one
// sequence of 40 and one of 260 (its last rows longer than a block), 4 blocks summing squares
// (each strides twice).
#include <cstdio>
#include <vector>
#include <random>
#define LAUNCHER(kernel, params, args) extern "C" void emu_##kernel(unsigned grid, unsigned block, params);
#include "launchers.h"
int main() {
    std::mt19937 g(1); std::uniform_real_distribution<float> u(-1, 1);
    auto vec = [&](size_t n) { std::vector<float> v(n); for (auto& x : v) x = u(g); return v; };
    int t = 40, rows = t;
    auto p = vec(rows * t); emu_causal_softmax(rows, 256, p.data(), rows, t, 0.3f);
    auto ds = vec(rows * t); emu_causal_softmax_backward(rows, 256, ds.data(), p.data(), rows, t, 0.3f);
    int t2 = 260; auto p2 = vec(t2 * t2); emu_causal_softmax(t2, 256, p2.data(), t2, t2, 0.3f);
    int r = 7, c = 300; auto logits = vec(r * c); std::vector<float> loss(r), dl(r * c); std::vector<unsigned> labels(r, 3);
    emu_softmax_cross_entropy(r, 256, loss.data(), dl.data(), logits.data(), labels.data(), r, c);
    auto y = vec(r * c), b = vec(c); emu_bias_add_rows(2, 256, y.data(), b.data(), r, c);
    std::vector<float> db(c); emu_bias_grad(2, 256, db.data(), y.data(), r, c, 0);
    auto x = vec(2000); std::vector<float> gy(2000), gx(2000); emu_gelu_forward(3, 256, gy.data(), x.data(), 2000);
    emu_gelu_backward(3, 256, gx.data(), x.data(), gy.data(), 2000);
    emu_relu_forward(3, 256, gy.data(), x.data(), 2000);
    emu_relu_backward(3, 256, gx.data(), x.data(), gy.data(), 2000);
    emu_tanh_forward(3, 256, gy.data(), x.data(), 2000);
    emu_tanh_backward(3, 256, gx.data(), gy.data(), x.data(), 2000);
    emu_sigmoid_forward(3, 256, gy.data(), x.data(), 2000);
    emu_sigmoid_backward(3, 256, gx.data(), gy.data(), x.data(), 2000);
    emu_add(3, 256, gy.data(), x.data(), gx.data(), 2000);
    emu_add_into(3, 256, gy.data(), x.data(), 2000);
    int V = 11, D = 37, R = 50; std::vector<float> ids(R); for (int i = 0; i < R; ++i) ids[i] = float((i * 7) % V);
    auto w = vec(V * D); std::vector<float> e(R * D), dw(V * D); emu_embedding_forward(4, 256, e.data(), ids.data(), w.data(), R, D);
    // The rows grouped by token as token_rows.rs groups them (rows by token, starts, tokens);
    // fewer blocks than tokens, so that blocks loop.
    std::vector<int> by_token, starts, tokens;
    for (int v = 0; v < V; ++v) {
        for (int i = 0; i < R; ++i) {
            if (int(ids[i]) != v) continue;
            if (tokens.empty() || tokens.back() != v) { starts.push_back(int(by_token.size())); tokens.push_back(v); }
            by_token.push_back(i);
        }
    }
    starts.push_back(R); int groups = int(tokens.size());
    by_token.insert(by_token.end(), starts.begin(), starts.end()); by_token.insert(by_token.end(), tokens.begin(), tokens.end());
    emu_embedding_backward(4, 256, dw.data(), by_token.data(), R, groups, e.data(), D);
    auto pw = vec(16 * D), px = vec(30 * D); std::vector<float> py(30 * D), pdw(16 * D);
    emu_position_forward(4, 256, py.data(), px.data(), pw.data(), 30, 10, D);
    emu_position_backward(2, 256, pdw.data(), py.data(), 3, 10, D, 1);
    int d = 700, lr = 3; auto lx = vec(lr * d), gam = vec(d), bet = vec(d); std::vector<float> ly(lr * d), mean(lr), rstd(lr), ldx(lr * d), dg(d), dbb(d);
    emu_layer_norm_forward(lr, 256, ly.data(), mean.data(), rstd.data(), lx.data(), gam.data(), bet.data(), lr, d);
    emu_layer_norm_backward_input(lr, 256, ldx.data(), lx.data(), ly.data(), gam.data(), mean.data(), rstd.data(), lr, d);
    emu_layer_norm_backward_params(3, 256, dg.data(), dbb.data(), lx.data(), ly.data(), mean.data(), rstd.data(), lr, d, 0);
    auto v = vec(1000), m = vec(1000), s = vec(1000), gr = vec(1000); for (auto& q : s) q = q * q;
    emu_adamw_update(4, 256, v.data(), m.data(), s.data(), gr.data(), 1000, 0.99f, 0.1f, 0.999f, 0.001f, 1.2f, 1e-8f, -0.001f, 1.0f);
    emu_sgd_update(4, 256, v.data(), m.data(), gr.data(), 1000, 0.1f, 0.9f, 0.0f, 0.0f, 1, 0, 1.0f);
    std::vector<double> parts(4); emu_sum_squares(4, 256, x.data(), 2000, parts.data());
    std::printf("kernel-races: every kernel ran\n");
}
