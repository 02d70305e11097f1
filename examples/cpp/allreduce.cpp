// Rank collectives from C++ with small RAII wrappers over vargr.h.
//
//   vargr run -n 3 -- ./allreduce
//
// Every rank allreduces a vector of doubles (sum), takes the maximum of the ranks into
// another buffer, gathers all ranks, receives a broadcast, and runs two conditional
// allreduce tests; it checks each result against the closed form and prints one line:
// "rank R of N: sum=... max=... allgather=... bcast=... cond=1,0 OK".
#include <cstdint>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <vargr.h>

namespace {

// Turns a vargr status into an exception carrying vargr's message.
void check(int rc, const char *what) {
    if (rc != VARGR_OK) {
        throw std::runtime_error(std::string(what) + ": " + vargr_status_name(rc) + ": " +
                                 vargr_last_error());
    }
}

// The world communicator: joined on construction, finalized on destruction.
class World {
public:
    World() { check(vargr_world_join(&comm_), "join"); }
    ~World() { vargr_world_finalize(comm_); }
    World(const World &) = delete;
    World &operator=(const World &) = delete;

    int rank() const {
        int r = 0;
        check(vargr_comm_rank(comm_, &r), "rank");
        return r;
    }
    int size() const {
        int s = 0;
        check(vargr_comm_size(comm_, &s), "size");
        return s;
    }
    void allreduce(std::vector<double> &buf, vargr_op op) {
        check(vargr_comm_allreduce(comm_, buf.data(), buf.size(), VARGR_DOUBLE, op), "allreduce");
    }
    void allreduce_into(const std::vector<double> &in, std::vector<double> &out, vargr_op op) {
        out.resize(in.size());
        check(vargr_comm_allreduce_into(comm_, in.data(), out.data(), in.size(), VARGR_DOUBLE, op),
              "allreduce_into");
    }
    std::vector<int32_t> allgather(int32_t mine) {
        std::vector<int32_t> all(static_cast<size_t>(size()));
        check(vargr_comm_allgather(comm_, &mine, all.data(), 1, VARGR_INT32), "allgather");
        return all;
    }
    double bcast(double value, int root) {
        check(vargr_comm_bcast(comm_, &value, 1, VARGR_DOUBLE, root), "bcast");
        return value;
    }
    vargr_comm *get() { return comm_; }

private:
    vargr_comm *comm_ = nullptr;
};

// A conditional allreduce, closed (collectively) on destruction.
class Cond {
public:
    Cond(World &w, vargr_cond_op op, vargr_predicate pred, double threshold) {
        check(vargr_cond_create(w.get(), op, pred, threshold, &cond_), "cond_create");
    }
    ~Cond() { vargr_cond_free(cond_); }
    Cond(const Cond &) = delete;
    Cond &operator=(const Cond &) = delete;

    bool test(double value) {
        vargr_cond_outcome o;
        check(vargr_cond_allreduce(cond_, value, &o), "cond_allreduce");
        return o.holds != 0;
    }

private:
    vargr_cond *cond_ = nullptr;
};

}  // namespace

int main() {
    try {
        World w;
        const int r = w.rank(), n = w.size();
        bool ok = true;

        std::vector<double> x = {double(r), 1.0, double(r) * r};
        w.allreduce(x, VARGR_OP_SUM);
        ok &= x[0] == n * (n - 1) / 2.0 && x[1] == n && x[2] == (n - 1) * n * (2.0 * n - 1) / 6;

        std::vector<double> mx;
        w.allreduce_into({double(r)}, mx, VARGR_OP_MAX);
        ok &= mx[0] == n - 1;

        std::vector<int32_t> all = w.allgather(r * 10);
        std::ostringstream gathered;
        for (size_t i = 0; i < all.size(); i++) {
            ok &= all[i] == int32_t(i) * 10;
            gathered << (i ? "," : "") << all[i];
        }

        double b = w.bcast(r == 0 ? 42.5 : -1.0, 0);
        ok &= b == 42.5;

        // Contributions r + 1 are positive, so partial sums bound the total from below.
        bool reached, unreachable;
        {
            Cond c(w, VARGR_COND_SUM, VARGR_PRED_GREATER_EQ, 1.0);
            reached = c.test(r + 1.0);
        }
        {
            Cond c(w, VARGR_COND_SUM, VARGR_PRED_GREATER_EQ, 1e9);
            unreachable = c.test(r + 1.0);
        }
        ok &= reached && !unreachable;

        std::cout << "rank " << r << " of " << n << ": sum=" << x[0] << "," << x[1] << ","
                  << x[2] << " max=" << mx[0] << " allgather=" << gathered.str()
                  << " bcast=" << b << " cond=" << reached << "," << unreachable
                  << (ok ? " OK" : " FAILED") << std::endl;
        return ok ? 0 : 1;
    } catch (const std::exception &e) {
        std::cerr << "allreduce: " << e.what() << std::endl;
        return 1;
    }
}
