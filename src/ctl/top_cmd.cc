// vrdma top: the terminal side. Interactive on a terminal (alternate screen, no echo, `q`
// quits, the terminal restored on every way out: q, Ctrl-C, SIGTERM, an error); in batch mode
// (-n N, or when stdout is not a terminal) it prints N screens one after another.
#include "ctl/top_cmd.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <thread>

#include "ctl/error.h"
#include "ctl/top_view.h"

namespace vrdma::ctl {

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

// The terminal in the state top needs, and back as it was when this goes away.
class RawTerminal {
 public:
  RawTerminal() {
    if (::tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      have_saved_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    std::fputs("\033[?1049h\033[?25l", stdout);  // alternate screen, cursor hidden
    std::fflush(stdout);
  }
  ~RawTerminal() {
    std::fputs("\033[?25h\033[?1049l", stdout);
    std::fflush(stdout);
    if (have_saved_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  termios saved_{};
  bool have_saved_ = false;
};

size_t terminal_width() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 200;
}

// Waits up to `ms` for a key; true when it was q (or Q).
bool quit_key(int ms) {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  if (::poll(&p, 1, ms) != 1) return false;
  char buf[64];
  ssize_t n = ::read(STDIN_FILENO, buf, sizeof(buf));
  for (ssize_t i = 0; i < n; ++i)
    if (buf[i] == 'q' || buf[i] == 'Q') return true;
  return false;
}

using Clock = std::chrono::steady_clock;

struct Sampler {
  const TopOptions& o;
  std::string label;
  TopSample prev;
  Clock::time_point prev_at;

  TopSample take(Clock::time_point* at) {
    auto status = fetch_status(o.daemon, &label);
    *at = Clock::now();
    return top_sample(status);
  }
  std::string screen(const TopSample& cur, Clock::time_point at, size_t width) {
    double seconds = std::chrono::duration<double>(at - prev_at).count();
    char title[256];
    std::snprintf(title, sizeof(title), "vrdma top - %s - every %.1f s - q quits", label.c_str(),
                  o.interval_s);
    return render_top(title, prev, cur, seconds, width);
  }
};

int batch(const TopOptions& o, Sampler& s) {
  s.prev = s.take(&s.prev_at);
  for (int i = 0; i < o.iterations && !g_stop; ++i) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));
    Clock::time_point at;
    TopSample cur = s.take(&at);
    std::cout << (i ? "\n" : "") << s.screen(cur, at, 1000) << std::flush;
    s.prev = std::move(cur);
    s.prev_at = at;
  }
  return kExitOk;
}

int interactive(const TopOptions& o, Sampler& s) {
  s.prev = s.take(&s.prev_at);
  RawTerminal term;
  auto draw = [&](const std::string& text) {
    // Home, the screen, clear what is left below it.
    std::string frame = "\033[H";
    for (char c : text) frame += c == '\n' ? std::string("\033[K\r\n") : std::string(1, c);
    frame += "\033[J";
    std::fwrite(frame.data(), 1, frame.size(), stdout);
    std::fflush(stdout);
  };
  draw(s.screen(s.prev, s.prev_at, terminal_width()));  // rates from the first interval on
  const int ms = static_cast<int>(std::lround(o.interval_s * 1000));
  while (!g_stop) {
    // Keys are looked at every 50 ms, the counters every interval.
    auto next = Clock::now() + std::chrono::milliseconds(ms);
    while (!g_stop && Clock::now() < next)
      if (quit_key(50)) return kExitOk;
    if (g_stop) break;
    Clock::time_point at;
    TopSample cur = s.take(&at);
    draw(s.screen(cur, at, terminal_width()));
    s.prev = std::move(cur);
    s.prev_at = at;
  }
  return kExitOk;
}

}  // namespace

int top_command(const TopOptions& o) {
  if (!(o.interval_s >= 0.1 && o.interval_s <= 3600))
    throw UsageError("--interval: between 0.1 and 3600 seconds");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  Sampler s{o, {}, {}, {}};
  const bool tty = ::isatty(STDIN_FILENO) && ::isatty(STDOUT_FILENO);
  if (o.iterations > 0 || !tty) {
    TopOptions b = o;
    if (b.iterations <= 0) b.iterations = 1;
    return batch(b, s);
  }
  return interactive(o, s);
}

}  // namespace vrdma::ctl
