// Stopping a fit cleanly on SIGINT (Ctrl-C) or SIGTERM (a scheduler's preemption, `kill`), so that a run
// stopped from outside loses nothing: TrainerOptions::handle_signals.
//
// While fit() runs with the option on, the first of those signals only raises a flag. The training loop reads
// it after each batch (every rank's flag, agreed, under ddp), lets an open gradient-accumulation window run to
// its step, and then throws Interrupted out of fit() at that step boundary: the on_exception hooks run there,
// where the weights, optimizer state, generator and loader position describe one moment, so a checkpoint taken
// then (OnExceptionCheckpoint) resumes exactly as if the run had not stopped. A second signal gets the
// signal's default action (the process ends at once), for a user who does not want to wait for the batch;
// the same signal again within a second counts as the same event (a whole process group signalled, and the
// launcher passing it on too). The handlers before fit() are restored after it, and a signal that came too
// late for the Trainer to stop for (as fit() was ending) is then raised again, to be handled as it would have
// been. A signal the process was started with ignored stays ignored.
#pragma once

#include <string>

#include "kiln/tensor/error.h"

namespace kiln::trainer {

// fit() stopped on a signal at an optimizer-step boundary.
class Interrupted : public Error {
 public:
  Interrupted(int signal, const std::string& what) : Error(what), signal_(signal) {}
  int signal() const { return signal_; }  // SIGINT or SIGTERM

 private:
  int signal_;
};

// "SIGINT", "SIGTERM", or "signal N".
std::string signal_name(int signal);

// Catches SIGINT and SIGTERM for its lifetime (nested scopes share the outermost one's handlers) and restores
// the handlers it found, raising a caught signal nobody consumed; a new outermost scope clears a flag left
// from before.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

// The first signal caught since the outermost scope began, or 0.
int pending_interrupt();
// The Trainer stopped for the pending signal: the scope's end does not raise it again.
void consume_interrupt();

}  // namespace kiln::trainer
