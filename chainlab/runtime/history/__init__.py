"""What recorded runs are used for (DESIGN §11-12): forks that reuse what would repeat
(:mod:`.fork`), duration estimates for the release order (:mod:`.estimates`) and the what-if
replay of a schedule (:mod:`.whatif`). Imports the engine only."""
