// A tiny program the launcher tests start as ranks. It uses no gradwire code; its rank comes
// from RANK. Every wait is bounded (kLongSleep) so a leaked helper still goes away on its own.
//
//   print N              N lines "out R I" on stdout and "err R I" on stderr
//   burst N BYTES        N lines of about BYTES bytes on stdout, written in odd-sized pieces
//   env                  the launcher's variables, one "NAME=value" line each ("<unset>")
//   partial              "no newline" on stdout without a final newline
//   progress             "\r 10%\r 50%\r100%\n" on stdout
//   fail-rank R CODE [hang]
//                        rank R exits CODE after 200 ms; the others print "pid=P" and sleep
//                        (ignoring SIGTERM with "hang")
//   signal-rank R SIG    rank R kills itself with SIG after 200 ms; the others sleep
//   blame-rank R         rank R sleeps (as if hung); every other rank writes a failure
//                        report blaming R to GRADWIRE_ERROR_FILE (core/failure_report.h's
//                        format) and exits 2 after 200 ms, odd ranks 100 ms before even
//   fail-until R CODE N  while TORCHELASTIC_RESTART_COUNT < N, rank R exits CODE after 100 ms
//                        (the others sleep); from restart N on, every rank prints
//                        "attempt K of max M" and exits 0
//   hang                 ignore SIGTERM and SIGINT, print "pid=P" and "ready", sleep
//   trap-term            print "pid=P" and "ready"; on SIGTERM/SIGINT print "rank R got
//                        signal S" and exit 0
//   leave-grandchild     fork a child that ignores SIGTERM and sleeps, print both pids, exit 0
//   sleep MS             sleep MS milliseconds, exit 0
//   netns                "netns=<inode>" of this process's network namespace, exit 0
//   stream SECONDS       rank 0 listens on MASTER_ADDR:MASTER_PORT; every other rank sends
//                        zeros to it for SECONDS; rank 0 prints "received B bytes in S s"
//                        (first byte to the last sender's end), exit 0
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

constexpr std::chrono::seconds kLongSleep{20};

void write_out(int fd, const std::string& text) {
  const char* data = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n <= 0) return;
    data += n;
    left -= static_cast<std::size_t>(n);
  }
}

void say(const std::string& line) { write_out(STDOUT_FILENO, line + "\n"); }

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : -1;
}

void sleep_for(std::chrono::milliseconds duration) { std::this_thread::sleep_for(duration); }

void print_pid() { say("pid=" + std::to_string(::getpid())); }

void ignore_sigterm() { ::signal(SIGTERM, SIG_IGN); }
void ignore_sigterm_and_sigint() {
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
}

volatile sig_atomic_t g_signal = 0;
void remember_signal(int signal_number) { g_signal = signal_number; }

// Rank 0 of "stream": accepts `senders` connections and counts what arrives until every
// one has closed.
int receive_stream(int senders) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(env_int("MASTER_PORT")));
  ::inet_pton(AF_INET, std::getenv("MASTER_ADDR"), &address.sin_addr);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener, senders) != 0) {
    write_out(STDERR_FILENO, "stream: cannot listen\n");
    return 1;
  }
  long long bytes = 0;
  std::chrono::steady_clock::time_point first{};
  char buffer[1 << 16];
  for (int i = 0; i < senders; ++i) {
    const int connection = ::accept(listener, nullptr, nullptr);
    if (connection < 0) return 1;
    while (true) {
      const ssize_t n = ::read(connection, buffer, sizeof buffer);
      if (n <= 0) break;
      if (bytes == 0) first = std::chrono::steady_clock::now();
      bytes += n;
    }
    ::close(connection);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - first).count();
  say("received " + std::to_string(bytes) + " bytes in " + std::to_string(seconds) + " s");
  return 0;
}

// Other ranks of "stream": connect (retrying while rank 0 starts), send for `seconds`.
int send_stream(double seconds) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(env_int("MASTER_PORT")));
  ::inet_pton(AF_INET, std::getenv("MASTER_ADDR"), &address.sin_addr);
  int sock = -1;
  for (int attempt = 0; attempt < 100; ++attempt) {
    sock = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(sock, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) break;
    ::close(sock);
    sock = -1;
    sleep_for(std::chrono::milliseconds(100));
  }
  if (sock < 0) return 1;
  static char zeros[1 << 16];
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (::write(sock, zeros, sizeof zeros) <= 0) return 1;
  }
  ::close(sock);
  return 0;
}

int usage() {
  write_out(STDERR_FILENO, "gradwire_test_helper: unknown or incomplete command\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string command = argv[1];
  const int rank = env_int("RANK");
  const std::string rank_text = std::to_string(rank);

  if (command == "print" && argc == 3) {
    int count = std::atoi(argv[2]);
    for (int i = 0; i < count; ++i) {
      say("out " + rank_text + " " + std::to_string(i));
      write_out(STDERR_FILENO, "err " + rank_text + " " + std::to_string(i) + "\n");
    }
    return 0;
  }
  if (command == "burst" && argc == 4) {
    int count = std::atoi(argv[2]);
    int bytes = std::atoi(argv[3]);
    std::string all;
    for (int i = 0; i < count; ++i) {
      all += "rank " + rank_text + " line " + std::to_string(i) + " " +
             std::string(static_cast<std::size_t>(bytes), static_cast<char>('a' + rank % 26)) +
             "\n";
    }
    // Odd-sized pieces so that lines arrive split across reads.
    for (std::size_t at = 0; at < all.size(); at += 777) {
      write_out(STDOUT_FILENO, all.substr(at, 777));
    }
    return 0;
  }
  if (command == "env") {
    for (const char* name :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
          "MASTER_PORT", "OMP_NUM_THREADS", "GRADWIRE_TEST_EXTRA", "GLOO_SOCKET_IFNAME",
          "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE"}) {
      const char* value = std::getenv(name);
      say(std::string(name) + "=" + (value != nullptr ? value : "<unset>"));
    }
    return 0;
  }
  if (command == "partial") {
    write_out(STDOUT_FILENO, "no newline");
    return 0;
  }
  if (command == "progress") {
    write_out(STDOUT_FILENO, "\r 10%");
    sleep_for(std::chrono::milliseconds(20));
    write_out(STDOUT_FILENO, "\r 50%");
    sleep_for(std::chrono::milliseconds(20));
    write_out(STDOUT_FILENO, "\r100%\n");
    return 0;
  }
  if (command == "fail-rank" && (argc == 4 || argc == 5)) {
    if (rank == std::atoi(argv[2])) {
      sleep_for(std::chrono::milliseconds(200));
      return std::atoi(argv[3]);
    }
    if (argc == 5 && std::strcmp(argv[4], "hang") == 0) ignore_sigterm();
    print_pid();
    sleep_for(kLongSleep);
    return 0;
  }
  if (command == "signal-rank" && argc == 4) {
    if (rank == std::atoi(argv[2])) {
      sleep_for(std::chrono::milliseconds(200));
      ::raise(std::atoi(argv[3]));
      return 0;
    }
    print_pid();
    sleep_for(kLongSleep);
    return 0;
  }
  if (command == "blame-rank" && argc == 3) {
    const std::string blamed = argv[2];
    if (rank_text == blamed) {
      print_pid();
      sleep_for(kLongSleep);
      return 0;
    }
    sleep_for(std::chrono::milliseconds(rank % 2 == 1 ? 100 : 200));
    if (const char* path = std::getenv("GRADWIRE_ERROR_FILE"); path && *path) {
      if (FILE* file = std::fopen(path, "w")) {
        std::fprintf(file, "gradwire-failure 1\nblame %s\nallreduce #7 failed on rank %s: rank %s "
                     "did not arrive within 1 s\n", blamed.c_str(), rank_text.c_str(), blamed.c_str());
        std::fclose(file);
      }
    }
    return 2;
  }
  if (command == "fail-until" && argc == 5) {
    const int attempt = env_int("TORCHELASTIC_RESTART_COUNT");
    if (attempt >= std::atoi(argv[4])) {
      say("attempt " + std::to_string(attempt) + " of max " +
          std::to_string(env_int("TORCHELASTIC_MAX_RESTARTS")));
      return 0;
    }
    if (rank == std::atoi(argv[2])) {
      sleep_for(std::chrono::milliseconds(100));
      return std::atoi(argv[3]);
    }
    sleep_for(kLongSleep);
    return 0;
  }
  if (command == "hang") {
    ignore_sigterm_and_sigint();
    print_pid();
    say("ready");
    sleep_for(kLongSleep);
    return 0;
  }
  if (command == "trap-term") {
    struct sigaction action {};
    action.sa_handler = remember_signal;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGTERM, &action, nullptr);
    ::sigaction(SIGINT, &action, nullptr);
    print_pid();
    say("ready");
    auto until = std::chrono::steady_clock::now() + kLongSleep;
    while (g_signal == 0 && std::chrono::steady_clock::now() < until) {
      sleep_for(std::chrono::milliseconds(5));
    }
    if (g_signal != 0) say("rank " + rank_text + " got signal " + std::to_string(g_signal));
    return 0;
  }
  if (command == "leave-grandchild") {
    pid_t child = ::fork();
    if (child == 0) {
      ignore_sigterm();
      sleep_for(kLongSleep);
      ::_exit(0);
    }
    say("grandchild=" + std::to_string(child));
    print_pid();
    sleep_for(std::chrono::milliseconds(100));  // let the grandchild ignore SIGTERM first
    return 0;
  }
  if (command == "netns") {
    struct stat ns {};
    if (::stat("/proc/self/ns/net", &ns) != 0) return 1;
    say("netns=" + std::to_string(ns.st_ino));
    return 0;
  }
  if (command == "stream" && argc == 3) {
    return rank == 0 ? receive_stream(env_int("WORLD_SIZE") - 1) : send_stream(std::atof(argv[2]));
  }
  if (command == "sleep" && argc == 3) {
    sleep_for(std::chrono::milliseconds(std::atoi(argv[2])));
    return 0;
  }
  return usage();
}
