# The docs are tested: every ```sh block of README.md and docs/*.md runs
# (tests/doc_test.sh: reduced sizes, expected output lines and the blocks
# that cannot run here are marked in the pages). One test per page, label
# docs; not in the sanitizer build (they check the pages, and the training
# runs they show would take many minutes there).
file(GLOB doc_pages ${PROJECT_SOURCE_DIR}/docs/*.md)
foreach(page ${PROJECT_SOURCE_DIR}/README.md ${doc_pages})
  get_filename_component(name ${page} NAME_WE)
  add_test(NAME doc_${name}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/doc_test.sh ${page} ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}
            ${CMAKE_CURRENT_BINARY_DIR}/doc_${name})
  set_tests_properties(doc_${name} PROPERTIES LABELS docs TIMEOUT 1800)
  if(REMAT_SANITIZE)
    set_tests_properties(doc_${name} PROPERTIES DISABLED ON)
  endif()
endforeach()

# What a newcomer meets on the command line: long options are spelled in
# full (a prefix is refused naming the option, an ambiguous one is called
# so), plan names the strategy a budget picks, info counts the default
# optimizer's state as plan does, a data set without a default directory
# names --data-dir.
remat_expect(NAME cli_prefix_refused RC 2
             PATTERN "remat plan: unknown option '--bud' \\(options are spelled in full: --budget\\)\n"
             COMMAND ${CLI} plan --model mlp --bud 1MiB)
remat_expect(NAME cli_prefix_ambiguous RC 2
             PATTERN "remat train: ambiguous option '--st' \\(could be [^)]*--strategy[^)]*--steps"
             COMMAND ${CLI} train --st 3)
remat_expect(NAME cli_plan_optimal_named RC 0
             PATTERN "^model cnn, batch 8, device cpu, strategy optimal \\(schedule from "
             COMMAND ${CLI} plan --model cnn --batch 8 --budget 40MiB)
remat_expect(NAME cli_info_optim RC 0
             PATTERN "store everything, adamw's state counted\\):\n.*\n  optimizer state +13\\.0 MiB\n"
             COMMAND ${CLI} info --model cnn --batch 8)
remat_expect(NAME cli_info_optim_none RC 0
             PATTERN "none: no optimizer state\\):\n.*\n  optimizer state +0 B\n"
             COMMAND ${CLI} info --model cnn --batch 8 --optim none)
remat_expect(NAME cli_cifar_needs_dir RC 1
             PATTERN "cifar10 has no default directory: pass the directory that holds its files \\(--data-dir DIR\\)"
             COMMAND ${CLI} train --model cnn --data cifar10 --steps 1)
