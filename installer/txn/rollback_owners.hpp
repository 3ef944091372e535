// What the installed dists own, as a rollback must know it (plan_rollback in history.cpp knows no
// dists): every RECORD of the environment read from its layout alone, no walk, as the rollback's
// own check of RECORDs listing cudafix's state reads them.
#pragma once

#include <set>
#include <string>

#include "installer/txn/journal.hpp"
#include "installer/txn/transaction.hpp"
#include "resolver/env/venv.hpp"

namespace cudafix::installer::txn {

// The owners read for a rollback of `done`. A dist is `done`'s own when its dist-info folder, or a
// path in it, is one `done` touched (it installed, reinstalled or removed that dist); every other
// installed dist is another's, whose files a rollback never moves.
[[nodiscard]] RollbackOwners rollback_owners(const resolver::EnvLayout& layout, const JournalRead& done);

}  // namespace cudafix::installer::txn
